import pytest
from ezgh_engine.core import validation
from ezgh_engine.errors import PayloadTooLarge, ValidationError


@pytest.mark.parametrize("key", ["signup-42", "a", "A.b_c:d-e", "x" * 128])
def test_run_keys_accepted(key):
    assert validation.check_run_key(key) == key


@pytest.mark.parametrize("key", ["", "x" * 129, "has space", "slash/no", "ünï", None, 7])
def test_run_keys_refused(key):
    with pytest.raises(ValidationError, match="runKey"):
        validation.check_run_key(key)


@pytest.mark.parametrize("name", ["onboarding", "A_b-9", "x" * 64])
def test_workflow_names_accepted(name):
    assert validation.check_workflow_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 65, "a.b", "a b"])
def test_workflow_names_refused(name):
    with pytest.raises(ValidationError, match="workflow"):
        validation.check_workflow_name(name)


def test_step_names_are_bytes_not_characters():
    assert validation.check_step_name("é" * 128)  # 256 bytes
    with pytest.raises(ValidationError):
        validation.check_step_name("é" * 129)  # 258 bytes
    with pytest.raises(ValidationError):
        validation.check_step_name("a\x00b")
    with pytest.raises(ValidationError):
        validation.check_step_name("")


@pytest.mark.parametrize("step_id", ["send#1", "a#b#12", "explicit-id", "x:y.z", "naïve name#3"])
def test_step_ids_accepted(step_id):
    assert validation.check_step_id(step_id) == step_id


@pytest.mark.parametrize("step_id", ["send#0", "send#", "bad id", "#1", "", None])
def test_step_ids_refused(step_id):
    with pytest.raises(ValidationError):
        validation.check_step_id(step_id)


def test_values_over_one_mib_are_too_large():
    validation.encode_value("x" * (1024 * 1024 - 2))
    with pytest.raises(PayloadTooLarge):
        validation.encode_value("x" * (1024 * 1024))


def test_non_finite_numbers_are_refused():
    with pytest.raises(ValidationError):
        validation.encode_value(float("nan"))
