"""A round of few rows runs without whole-stage code generation (compiling its plans costs more
than running them); a big round, and every other user of the session, keeps Spark's settings."""

import pytest

from binlake.spark import SMALL_ROUND_ROWS, small_plans

CODEGEN = "spark.sql.codegen.wholeStage"


@pytest.fixture
def session(spark):
    """A session of its own with Spark's default (the test suite's session compiles nothing)."""
    own = spark.newSession()
    own.conf.set(CODEGEN, "true")
    return own


def test_a_small_round_runs_without_code_generation_and_the_setting_is_put_back(session):
    with small_plans(session, 40):
        assert session.conf.get(CODEGEN) == "false"
        assert session.range(5).selectExpr("sum(id)").first()[0] == 10
    assert session.conf.get(CODEGEN) == "true"


def test_a_setting_the_session_did_not_have_is_unset_again(session):
    session.conf.unset(CODEGEN)
    default = session.conf.get(CODEGEN)
    with small_plans(session, 1):
        assert session.conf.get(CODEGEN) == "false"
    assert session.conf.get(CODEGEN) == default


def test_a_big_round_or_one_of_unknown_size_keeps_the_sessions_settings(session):
    for rows in (SMALL_ROUND_ROWS + 1, None):
        with small_plans(session, rows):
            assert session.conf.get(CODEGEN) == "true"


def test_the_setting_is_put_back_when_the_round_fails(session):
    with pytest.raises(RuntimeError, match="the round failed"), small_plans(session, 1):
        raise RuntimeError("the round failed")
    assert session.conf.get(CODEGEN) == "true"


def test_a_round_on_its_own_session_leaves_the_other_sessions_alone(spark, session):
    other = spark.newSession()
    other.conf.set(CODEGEN, "true")
    with small_plans(session, 1):
        assert other.conf.get(CODEGEN) == "true"
