"""Extra Spark settings for local sessions come from BINLAKE_SPARK_CONF (binlake.spark)."""

import pytest

from binlake.errors import ConfigError
from binlake.spark import env_spark_conf


def test_pairs_are_split_on_semicolons_and_trimmed():
    text = " spark.sql.shuffle.partitions=2 ; spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -Xss4m;"

    assert env_spark_conf(text) == {
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -Xss4m",
    }


def test_an_empty_variable_adds_nothing(monkeypatch):
    monkeypatch.delenv("BINLAKE_SPARK_CONF", raising=False)

    assert env_spark_conf() == {}
    assert env_spark_conf("  ;  ") == {}


@pytest.mark.parametrize("item", ["spark.sql.shuffle.partitions", "shuffle.partitions=2"])
def test_anything_but_a_spark_key_value_pair_is_refused_with_the_fix(item):
    with pytest.raises(ConfigError) as err:
        env_spark_conf(f"spark.ui.enabled=false;{item}")

    assert str(err.value) == (
        f"BINLAKE_SPARK_CONF: {item!r} is not a spark.* key=value pair: "
        "write it like spark.sql.shuffle.partitions=2;spark.driver.memory=4g"
    )
