"""The SDK is typed as the docs use it: a bare `ctx: Context` types `ctx.step`, and
`ctx.step.run` answers the type its function returns (mypy over the seed docs' examples)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

SDK = Path(__file__).resolve().parents[2] / "sdk"

# The seed docs' Python examples (000, 001, 004), with the names they leave to the reader.
DOCS_EXAMPLES = """
import json
from typing import Any
from ezgh_workflows import Context, PushApp, QueuesClient, workflow

class Db:
    def get(self, user_id: str) -> dict[str, str]: return {"email": user_id}

class Email:
    def send(self, to: str, text: str) -> bool: return True

class Shop:
    def place(self, order: Any) -> dict[str, str]: return {"orderId": "1"}
    def cancel(self, order_id: str) -> None: ...
    def ship(self, order_id: str, paid: Any) -> str: return order_id

db, email, shop = Db(), Email(), Shop()
queues = QueuesClient()


@workflow("onboarding")
async def onboarding(ctx: Context) -> bool:
    user = await ctx.step.run("load-user", lambda: db.get(ctx.input["userId"]))
    await ctx.step.run("welcome-email", lambda: email.send(user["email"], "Welcome!"))
    await ctx.step.sleep("cooldown", "3d")
    return await ctx.step.run("follow-up", lambda: email.send(user["email"], "How is it going?"))


@workflow("order")
async def order(ctx: Context) -> None:
    order_id = ctx.input["orderId"]
    placed = await ctx.step.run("place", lambda: shop.place(ctx.input))
    await ctx.step.send_to_queue("notify", queues, "q-1", [{"body": json.dumps(placed)}])
    paid = await ctx.step.wait_for_message(
        "paid", queue_id="q-1", key=f"order:{order_id}", timeout_seconds=3600
    )
    if paid is None:
        return await ctx.step.run("cancel-order", lambda: shop.cancel(order_id))
    await ctx.step.run("ship", lambda: shop.ship(order_id, json.loads(paid["body"])))


async def stamp(i: int) -> int:
    return i


@workflow("loop")
async def loop(ctx: Context) -> int:
    total = 0
    for i in range(3):
        total += await ctx.step.run("s", lambda i=i: stamp(i))
    return total


app = PushApp([onboarding, order, loop])
"""


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One incremental cache for the module's runs: the standard library's and the SDK's
    types are checked once, not per test (each example is a new file, checked anew)."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(tmp_path: Path, source: str, cache: Path) -> tuple[str, int]:
    path = tmp_path / "example.py"
    path.write_text(textwrap.dedent(source))
    out, err, code = mypy_api.run(
        [
            str(path),
            "--cache-dir",
            str(cache),
            "--python-version",
            "3.11",
            "--check-untyped-defs",
            "--warn-return-any",
            "--no-error-summary",
        ]
    )
    return out + err, code


@pytest.fixture()
def sdk_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYPYPATH", str(SDK))


def test_the_docs_examples_type_check(tmp_path: Path, sdk_on_path: None, mypy_cache: Path) -> None:
    out, code = _mypy(tmp_path, DOCS_EXAMPLES, mypy_cache)
    assert code == 0, out


def test_a_misspelt_step_call_is_an_error(
    tmp_path: Path, sdk_on_path: None, mypy_cache: Path
) -> None:
    source = """
    from ezgh_workflows import Context, workflow

    @workflow("w")
    async def w(ctx: Context) -> None:
        await ctx.step.runn("a", lambda: 1)
    """
    out, code = _mypy(tmp_path, source, mypy_cache)
    assert code == 1
    assert 'has no attribute "runn"' in out


def test_step_run_answers_what_its_function_returns(
    tmp_path: Path, sdk_on_path: None, mypy_cache: Path
) -> None:
    source = """
    from ezgh_workflows import BlockingSteps, Context, workflow

    async def fetch() -> list[int]:
        return [1]

    @workflow("w")
    async def w(ctx: Context) -> None:
        reveal_type(await ctx.step.run("a", lambda: "text"))
        reveal_type(await ctx.step.run("b", fetch))
        reveal_type(await ctx.step.now("c"))

    @workflow("p")
    def p(ctx: Context[BlockingSteps]) -> None:
        reveal_type(ctx.step.run("a", lambda: 3))
        reveal_type(ctx.step.run("b", fetch))
    """
    out, _ = _mypy(tmp_path, source, mypy_cache)
    revealed = [
        line.split("Revealed type is ")[1] for line in out.splitlines() if "Revealed" in line
    ]
    assert revealed == [
        '"str"',
        '"list[int]"',
        '"datetime.datetime"',
        '"int"',
        '"list[int]"',
    ], out
