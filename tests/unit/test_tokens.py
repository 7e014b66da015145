import pytest
from ezgh_engine.core import tokens
from ezgh_engine.errors import Unauthorized

CLAIMS = tokens.InvocationClaims("run-1", "proj-1", epoch=3, attempt=2, expires_ms=10_000)


def test_round_trip():
    token = tokens.mint("secret", CLAIMS)
    assert tokens.verify("secret", token, now_ms=5_000) == CLAIMS


def test_wrong_secret_is_refused():
    token = tokens.mint("secret", CLAIMS)
    with pytest.raises(Unauthorized):
        tokens.verify("other", token, now_ms=5_000)


def test_tampered_claims_are_refused():
    token = tokens.mint("secret", CLAIMS)
    other = tokens.mint("secret", tokens.InvocationClaims("run-2", "proj-1", 3, 2, 10_000))
    forged = other.split(".")[0] + "." + token.split(".")[1]
    with pytest.raises(Unauthorized):
        tokens.verify("secret", forged, now_ms=5_000)


def test_expired_is_refused():
    token = tokens.mint("secret", CLAIMS)
    with pytest.raises(Unauthorized, match="expired"):
        tokens.verify("secret", token, now_ms=10_001)


@pytest.mark.parametrize("garbage", ["", ".", "abc", "a.b.c", "e30.x"])
def test_garbage_is_refused(garbage):
    with pytest.raises(Unauthorized):
        tokens.verify("secret", garbage, now_ms=0)
