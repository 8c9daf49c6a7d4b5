"""What an unexpected error's one line says: the cause, not the wrapper around it."""

from __future__ import annotations

from binlake.errors import cause_of

# Py4J's text for an exception raised in Spark's JVM, as a silver run printed it (trimmed stack).
PY4J_TEXT = (
    "An error occurred while calling o72.sql.\n"
    ": org.apache.spark.sql.delta.DeltaTableFeatureException: [DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT] "
    "Your table schema requires manually enablement of the following table feature(s): timestampNtz.\n"
    "\tat org.apache.spark.sql.delta.DeltaErrorsBase.tableFeaturesRequireManualEnablementException"
    "(DeltaErrors.scala:2442)\n"
)


def test_a_jvm_error_is_named_by_its_java_class_and_message():
    assert cause_of(Exception(PY4J_TEXT)) == (
        "DeltaTableFeatureException: [DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT] Your table schema requires "
        "manually enablement of the following table feature(s): timestampNtz."
    )


def test_a_message_ending_in_a_colon_keeps_its_next_line_but_no_stack():
    text = (
        "[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK constraint small (qty < 100) violated by row with values:\n"
        " - qty : 500\n"
    )
    assert cause_of(ValueError(text)) == f"ValueError: {text.splitlines()[0]} - qty : 500"
    assert cause_of(ValueError("nothing left:\n\tat Foo.bar(Foo.java:1)")) == "ValueError: nothing left:"


def test_an_error_without_a_message_is_its_type():
    assert cause_of(KeyError()) == "KeyError"
