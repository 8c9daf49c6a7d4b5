"""TLS to the source: binlake verifies the server against source.tls.ca (and its name, unless
verify_identity is false), and each way it can go wrong is one line that says what to set.

A CA and server certificates are generated here; the server is a real MariaDB started with
--ssl-ca/--ssl-cert/--ssl-key and an account that REQUIREs SSL.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from binlake.config import load_config_text
from binlake.devtools.mariadb import LocalMariaDB
from binlake.errors import SourceConnectionError
from binlake.source.mysql import connect, connection_kwargs, master_status, query
from binlake.source.preflight import run_preflight

USER, PASSWORD = "tlsuser", "tls-Pw-31f9"


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def make_ca(name: str):
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_server_cert(ca_key, ca_cert, names: list[str]):
    key = _key()
    sans = [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n) for n in names]
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca_key, ca_cert = make_ca("binlake test CA")
    key, cert = make_server_cert(ca_key, ca_cert, ["127.0.0.1", "localhost"])
    wrong_name_key, wrong_name_cert = make_server_cert(ca_key, ca_cert, ["db.example.internal"])
    _, other_ca = make_ca("some other CA")
    pem = serialization.Encoding.PEM
    return {
        "dir": d,
        "ca": write(d / "ca.pem", ca_cert.public_bytes(pem)),
        "other_ca": write(d / "other-ca.pem", other_ca.public_bytes(pem)),
        "cert": write(d / "server-cert.pem", cert.public_bytes(pem)),
        "key": write(d / "server-key.pem", _pem_key(key)),
        "wrong_name_cert": write(d / "wrong-name-cert.pem", wrong_name_cert.public_bytes(pem)),
        "wrong_name_key": write(d / "wrong-name-key.pem", _pem_key(wrong_name_key)),
    }


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory, pki):
    d = pki["dir"]
    # The server reads its certificate from these paths; a test may swap them and FLUSH SSL.
    shutil.copy(pki["cert"], d / "live-cert.pem")
    shutil.copy(pki["key"], d / "live-key.pem")
    db = LocalMariaDB(
        tmp_path_factory.mktemp("tls"),
        extra_args=[f"--ssl-ca={pki['ca']}", f"--ssl-cert={d / 'live-cert.pem'}", f"--ssl-key={d / 'live-key.pem'}"],
    )
    db.start()
    db.execute(
        f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}' REQUIRE SSL",
        f"GRANT SELECT, REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO '{USER}'@'127.0.0.1'",
        "CREATE DATABASE shop",
        "CREATE TABLE shop.orders (id INT PRIMARY KEY, total DECIMAL(10,2))",
        "INSERT INTO shop.orders VALUES (1, 9.99)",
    )
    yield db
    db.destroy()


def config(server, tls: dict | None = None, user=USER, password=PASSWORD):
    source = {
        "host": "127.0.0.1",
        "port": server.port,
        "user": user,
        "password": password,
        "server_id": 5401,
        "tables": ["shop.*"],
    }
    if tls is not None:
        source["tls"] = tls
    return load_config_text(yaml.safe_dump({"source": source, "lakehouse": {"path": "/nonexistent"}}), environ={})


def test_with_the_ca_configured_the_connection_is_encrypted_and_verified(tls_server, pki):
    cfg = config(tls_server, {"ca": pki["ca"]})
    with connect(cfg.source) as conn:
        cipher = query(conn, "SHOW SESSION STATUS LIKE 'Ssl_cipher'")[0]["Value"]
        version = query(conn, "SHOW SESSION STATUS LIKE 'Ssl_version'")[0]["Value"]
    assert cipher
    assert version.startswith("TLS")
    assert run_preflight(cfg).ok


def test_an_account_that_requires_tls_without_tls_configured_says_to_set_the_ca(tls_server):
    with pytest.raises(SourceConnectionError) as info:
        connect(config(tls_server).source)
    assert str(info.value) == (
        f"MySQL at 127.0.0.1:{tls_server.port} requires TLS for user '{USER}': set source.tls.ca to the server's "
        "CA certificate"
    )


def test_a_wrong_password_is_still_a_wrong_password_when_the_server_offers_tls(tls_server):
    with pytest.raises(SourceConnectionError) as info:
        connect(config(tls_server, password="wrong").source)
    assert str(info.value) == (
        f"MySQL at 127.0.0.1:{tls_server.port} refused user '{USER}': check source.user and source.password"
    )


def test_a_server_certificate_from_another_ca_fails_the_handshake(tls_server, pki):
    with pytest.raises(SourceConnectionError) as info:
        connect(config(tls_server, {"ca": pki["other_ca"]}).source)
    assert str(info.value) == (
        f"TLS handshake with 127.0.0.1:{tls_server.port} failed: check source.tls (ca, cert, key) matches the "
        "server's certificates"
    )


def test_a_server_certificate_for_another_name_fails_unless_verify_identity_is_off(tls_server, pki):
    d = pki["dir"]
    shutil.copy(pki["wrong_name_cert"], d / "live-cert.pem")
    shutil.copy(pki["wrong_name_key"], d / "live-key.pem")
    tls_server.execute("FLUSH SSL")
    try:
        with pytest.raises(SourceConnectionError) as info:
            connect(config(tls_server, {"ca": pki["ca"]}).source)
        assert str(info.value).startswith(f"TLS handshake with 127.0.0.1:{tls_server.port} failed")
        # Same CA, name not checked: for servers reached through an address not in the certificate.
        with connect(config(tls_server, {"ca": pki["ca"], "verify_identity": False}).source) as conn:
            assert query(conn, "SHOW SESSION STATUS LIKE 'Ssl_cipher'")[0]["Value"]
    finally:
        shutil.copy(pki["cert"], d / "live-cert.pem")
        shutil.copy(pki["key"], d / "live-key.pem")
        tls_server.execute("FLUSH SSL")


def test_the_binlog_reader_connects_over_tls_with_connection_kwargs(tls_server, pki):
    """What capture passes to python-mysql-replication: connection_kwargs minus the database."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import WriteRowsEvent

    cfg = config(tls_server, {"ca": pki["ca"]})
    with connect(cfg.source) as conn:
        start = master_status(conn)
    tls_server.execute("INSERT INTO shop.orders VALUES (2, 19.50)")
    settings = connection_kwargs(cfg.source)
    settings.pop("database")
    reader = BinLogStreamReader(
        connection_settings=settings,
        server_id=cfg.source.server_id,
        log_file=start.file,
        log_pos=start.pos,
        # is_mariadb=True would ignore log_file/log_pos (it dumps from the first binlog unless
        # given a GTID); the file/pos dump works on MariaDB as on MySQL.
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent],
    )
    try:
        # The account REQUIREs SSL: reading the binlog at all proves the stream went over TLS.
        rows = [row["values"] for event in reader for row in event.rows]
    finally:
        reader.close()
    assert rows == [{"id": 2, "total": Decimal("19.50")}]


def test_a_server_requiring_secure_transport_for_everyone_says_to_set_the_ca(tls_server):
    tls_server.execute("SET GLOBAL require_secure_transport = ON")
    try:
        with pytest.raises(SourceConnectionError) as info:
            connect(config(tls_server, user="cdc", password=tls_server.cdc_password).source)
    finally:
        tls_server.execute("SET GLOBAL require_secure_transport = OFF")
    # MariaDB answers this with "access denied" too; the TLS probe tells the two apart.
    assert str(info.value) == (
        f"MySQL at 127.0.0.1:{tls_server.port} requires TLS for user 'cdc': "
        "set source.tls.ca to the server's CA certificate"
    )
