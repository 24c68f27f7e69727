"""Seeded sandbox worlds: database tables, config files, small buggy Python repositories."""

from __future__ import annotations

import re
from dataclasses import dataclass
from random import Random
from typing import Any

from ._common import CITIES, DEPARTMENTS, FIRST, LAST, ORDER_STATES, PRODUCTS, person, pool


def orders(rng: Random, n: int, customers: list[str] | None = None) -> list[dict[str, Any]]:
    customers = customers or [person(rng) for _ in range(n)]
    rows: list[dict[str, Any]] = []
    for i in range(n):
        product = rng.choice(PRODUCTS)
        rows.append(
            {
                "id": 1000 + rng.randint(1, 8999) if i == 0 else rows[-1]["id"] + rng.randint(1, 40),
                "customer": customers[i % len(customers)],
                "product": product,
                "sku": f"{product[:3].upper()}-{rng.randint(1000, 9999)}",
                "qty": rng.randint(1, 6),
                "status": rng.choice(ORDER_STATES),
                "total": round(rng.randint(15, 900) + 0.5, 2),
            }
        )
    return rows


def products(rng: Random, skus: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "sku": s,
            "name": next(p for p in PRODUCTS if p[:3].upper() == s[:3]),
            "stock": rng.randint(0, 300),
            "price": round(rng.randint(9, 400) + 0.99, 2),
        }
        for s in skus
    ]


def tickets(rng: Random, n: int, teams: list[str]) -> list[dict[str, Any]]:
    start = rng.randint(100, 900)
    return [
        {
            "id": start + i,
            "team": rng.choice(teams),
            "priority": rng.choice(["low", "medium", "high"]),
            "status": rng.choice(["open", "open", "resolved", "closed", "archived"]),
            "title": f"{rng.choice(['Fix', 'Review', 'Update', 'Investigate'])} "
            f"{rng.choice(PRODUCTS)} "
            f"{rng.choice(['sync', 'export', 'pricing', 'labels', 'alerts'])}",
        }
        for i in range(n)
    ]


def users(rng: Random, n: int) -> list[dict[str, Any]]:
    start = rng.randint(10, 90) * 100
    out = []
    for i in range(n):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        active = rng.random() < 0.6
        out.append(
            {
                "id": start + i,
                "name": f"{first} {last}",
                "email": f"{first.lower()}.{last.lower()}@mail.example",
                "status": "active" if active else "inactive",
                "last_login": f"202{4 if active else rng.choice([1, 2])}-"
                f"{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            }
        )
    return out


def teams(rng: Random, n: int) -> list[str]:
    return rng.sample(DEPARTMENTS, n)


# --- config files ---


def config(rng: Random) -> tuple[str, dict[str, str]]:
    """An INI-style config: its text and its key/value pairs."""
    values = {
        "log_level": rng.choice(["INFO", "WARNING", "ERROR"]),
        "max_connections": str(rng.randint(8, 64)),
        "timeout_seconds": str(rng.randint(5, 60)),
        "cache_dir": f"/var/cache/{rng.choice(['svc', 'app', 'api'])}",
        "region": rng.choice(["eu-west-1", "eu-central-1", "us-east-2", "ap-south-1"]),
        "retry_backoff_ms": str(rng.choice([100, 250, 500])),
        "enable_metrics": rng.choice(["true", "false"]),
        "home_city": rng.choice(CITIES),
    }
    text = "[service]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
    return text, values


NEW_VALUES = {
    "log_level": ["DEBUG", "TRACE"],
    "max_connections": ["96", "128", "200"],
    "timeout_seconds": ["90", "120"],
    "cache_dir": ["/srv/cache", "/tmp/cache"],
    "region": ["eu-north-1", "us-west-2"],
    "retry_backoff_ms": ["750", "1000"],
    "enable_metrics": [],
    "home_city": [],
}


def config_change(rng: Random, values: dict[str, str]) -> tuple[str, str, str]:
    key = rng.choice([k for k, v in NEW_VALUES.items() if v])
    return key, values[key], rng.choice(NEW_VALUES[key])


def line_rx(key: str, value: str) -> str:
    return rf"(?m)^{re.escape(key)}\s*=\s*{re.escape(value)}\s*$"


# --- buggy repositories ---


@dataclass
class Bug:
    """One seeded bug: its buggy code, the oracle's edit (``find`` → ``replace``), the
    real pytest assertions that fail on it, and fixes written differently that the tests
    must pass (``right``) or fail (``wrong``), each an edit of the source file."""

    fn: str
    code: str
    find: str
    replace: str
    asserts: tuple[str, ...]
    message: str
    symptom: str
    right: tuple[tuple[str, str], ...] = ()
    wrong: tuple[tuple[str, str], ...] = ()
    names: tuple[str, ...] = ()  # what the test file imports (default: fn)
    kind: int = -1  # which of the BUG_KINDS generators made it


def _comment(find: str, replace: str) -> tuple[str, str]:
    """A wrong fix: the right code in a comment after the unchanged bug."""
    return find, f"{find}  # {replace}"


def _bug(kind: int, rng: Random) -> Bug:
    bug = _draw_bug(kind, rng)
    bug.kind = kind
    return bug


def _draw_bug(kind: int, rng: Random) -> Bug:
    if kind == 0:
        fn = rng.choice(["add_totals", "combine_amounts", "sum_pair", "merge_counts"])
        return Bug(
            fn,
            f'def {fn}(a, b):\n    """Return the sum of a and b."""\n    return a - b\n',
            "return a - b",
            "return a + b",
            (f"assert {fn}(2, 3) == 5", f"assert {fn}(0, 0) == 0", f"assert {fn}(-4, 1) == -3"),
            f"AssertionError: assert {fn}(2, 3) == 5 (got -1)",
            "returns the difference instead of the sum",
            right=(("return a - b", "return b + a"), ("return a - b", "return sum((a, b))"), ("a - b", "a - (-b)")),
            wrong=(
                ("return a - b", "return a + b or True"),
                _comment("return a - b", "return a + b"),
                ("return a - b", "return abs(a) + abs(b)"),
            ),
        )
    if kind == 1:
        fn = rng.choice(["sum_to", "total_upto", "triangular"])
        return Bug(
            fn,
            f'def {fn}(n):\n    """Return 1 + 2 + ... + n."""\n    return sum(range(1, n))\n',
            "range(1, n)",
            "range(1, n + 1)",
            (f"assert {fn}(4) == 10", f"assert {fn}(1) == 1", f"assert {fn}(0) == 0"),
            f"AssertionError: assert {fn}(4) == 10 (got 6)",
            "leaves n itself out of the sum",
            right=(
                ("return sum(range(1, n))", "return n * (n + 1) // 2"),
                ("range(1, n)", "range(n + 1)"),
                ("return sum(range(1, n))", "return sum(i for i in range(1, n+1))"),
            ),
            wrong=(
                ("return sum(range(1, n))", "return sum(range(1, n + 1)) or True"),
                _comment("return sum(range(1, n))", "range(1, n + 1)"),
                ("range(1, n)", "range(n)"),
            ),
        )
    if kind == 2:
        fn, limit = rng.choice(["is_adult", "can_vote", "is_eligible"]), rng.choice([16, 18, 21])
        return Bug(
            fn,
            f'def {fn}(age):\n    """True for people aged {limit} or older."""\n    return age > {limit}\n',
            f"age > {limit}",
            f"age >= {limit}",
            (
                f"assert {fn}({limit}) is True",
                f"assert {fn}({limit + 5}) is True",
                f"assert {fn}({limit - 1}) is False",
                f"assert {fn}(0) is False",
            ),
            f"AssertionError: assert {fn}({limit}) is True (got False)",
            f"rejects people who are exactly {limit}",
            right=(
                (f"age > {limit}", f"not age < {limit}"),
                (f"age > {limit}", f"age > {limit - 1}"),
                (f"age > {limit}", f"{limit} <= age  # inclusive"),
            ),
            wrong=(
                (f"age > {limit}", f"age >= {limit} or True"),
                _comment(f"age > {limit}", f"age >= {limit}"),
                (f"age > {limit}", f"age > {limit - 2}"),
            ),
        )
    if kind == 3:
        fn = rng.choice(["parse_int", "to_int", "read_number"])
        bad = "int(text.lstrip('-+'))"
        return Bug(
            fn,
            f'def {fn}(text):\n    """Parse a signed integer such as \'-42\'."""\n    return {bad}\n',
            bad,
            "int(text)",
            (
                f"assert {fn}('-3') == -3",
                f"assert {fn}('42') == 42",
                f"assert {fn}('+7') == 7",
                f"assert {fn}('0') == 0",
            ),
            f"AssertionError: assert {fn}('-3') == -3 (got 3)",
            "drops the minus sign of negative numbers",
            right=(
                (bad, "int(text.strip())"),
                (bad, "int(text, 10)"),
                (f"return {bad}", "return -int(text[1:]) if text.startswith('-') else int(text.lstrip('+'))"),
            ),
            wrong=((bad, "int(text) or True"), _comment(bad, "int(text)"), (bad, f"-{bad}")),
        )
    if kind == 4:
        name, right, wrong = rng.choice(
            [("TIMEOUT_SECONDS", 30, 3), ("MAX_BATCH", 500, 50), ("RETRY_DELAY_MS", 250, 25)]
        )
        fn = "default_" + name.lower()
        return Bug(
            fn,
            f"# Documented default: {right} (see docs/config.md).\n{name} = {wrong}\n\n\n"
            f"def {fn}():\n    return {name}\n",
            f"{name} = {wrong}",
            f"{name} = {right}",
            (f"assert {name} == {right}", f"assert {fn}() == {right}"),
            f"AssertionError: assert {name} == {right} (got {wrong})",
            f"uses {wrong} for {name} although the documented default is {right}",
            right=(
                (f"{name} = {wrong}", f"{name} = {right}  # documented"),
                (f"{name} = {wrong}", f'{name} = int("{right}")'),
                (f"{name} = {wrong}", f"{name} = {wrong} * 10"),
            ),
            wrong=(
                (f"return {name}", f"return {right} or True"),
                _comment(f"{name} = {wrong}", f"{name} = {right}"),
                (f"{name} = {wrong}", f"{name} = {right + 1}"),
            ),
            names=(fn, name),
        )
    if kind == 5:
        fn = rng.choice(["normalize_code", "canonical_sku", "clean_tag"])
        bad = "code.strip().lower()"
        return Bug(
            fn,
            f'def {fn}(code):\n    """Codes are stored in upper case, without surrounding '
            f'spaces."""\n    return {bad}\n',
            bad,
            "code.strip().upper()",
            (f"assert {fn}(' ab12 ') == 'AB12'", f"assert {fn}('x') == 'X'", f"assert {fn}('  ') == ''"),
            f"AssertionError: assert {fn}(' ab12 ') == 'AB12' (got 'ab12')",
            "lower-cases the code",
            right=(
                (bad, "code.upper().strip()"),
                (bad, "str.upper(code.strip())"),
                (bad, "code.strip().casefold().upper()"),
            ),
            wrong=((bad, "code.strip().upper() or True"), _comment(bad, "code.strip().upper()"), (bad, "code.upper()")),
        )
    if kind == 6:
        fn = rng.choice(["mean", "average", "mean_latency"])
        bad = "sum(values) // len(values)"
        return Bug(
            fn,
            f'def {fn}(values):\n    """Arithmetic mean of a non-empty list."""\n    return {bad}\n',
            "//",
            "/",
            (f"assert {fn}([1, 2]) == 1.5", f"assert {fn}([0, 0]) == 0", f"assert {fn}([1, 2, 3, 4]) == 2.5"),
            f"AssertionError: assert {fn}([1, 2]) == 1.5 (got 1)",
            "rounds the mean down",
            right=(
                (bad, "__import__('statistics').mean(values)"),
                (bad, "sum(values) / float(len(values))"),
                (bad, "float(sum(values)) / len(values)"),
            ),
            wrong=(
                (bad, "sum(values) / len(values) or True"),
                _comment(bad, "sum(values) / len(values)"),
                (bad, "round(sum(values) / len(values))"),
            ),
        )
    if kind == 7:
        fn = rng.choice(["last_item", "newest", "tail_value"])
        bad = "items[len(items)]"
        return Bug(
            fn,
            f'def {fn}(items):\n    """The last element of a non-empty list."""\n    return {bad}\n',
            bad,
            "items[-1]",
            (f"assert {fn}([1, 2, 3]) == 3", f"assert {fn}([5]) == 5", f"assert {fn}([1, 0]) == 0"),
            "IndexError: list index out of range",
            "crashes with an IndexError",
            right=((bad, "items[len(items) - 1]"), (bad, "items[-1:][0]"), (bad, "list(reversed(items))[0]")),
            wrong=((bad, "items[-1] or True"), _comment(bad, "items[-1]"), (bad, "items[0]")),
        )
    fn = rng.choice(["apply_discount", "discounted", "sale_price"])
    return Bug(
        fn,
        f'def {fn}(price, percent):\n    """Price after a discount of `percent` percent (20 means '
        '20% off)."""\n'
        "    return price - price * percent\n",
        "price * percent",
        "price * percent / 100",
        (
            f"assert {fn}(50, 20) == pytest.approx(40)",
            f"assert {fn}(80, 25) == pytest.approx(60)",
            f"assert {fn}(50, 100) == pytest.approx(0)",
        ),
        f"AssertionError: assert {fn}(50, 20) == 40 (got -950)",
        "treats the percentage as a fraction",
        right=(
            ("price * percent", "price * (percent / 100)"),
            ("price * percent", "price * percent * 0.01"),
            ("return price - price * percent", "return price * (100 - percent) / 100"),
        ),
        wrong=(
            ("price * percent", "price * percent / 100 or True"),
            _comment("price * percent", "price * percent / 100"),
            ("price * percent", "percent / 100"),
        ),
    )


BUG_KINDS = 9
MODULES = pool("MODULES")
HELPERS = (
    (
        "clamp",
        "def clamp(value, low, high):\n    return max(low, min(high, value))\n",
        ("assert clamp(5, 0, 3) == 3", "assert clamp(-1, 0, 3) == 0", "assert clamp(2, 0, 3) == 2"),
    ),
    (
        "is_blank",
        "def is_blank(text):\n    return not text.strip()\n",
        ("assert is_blank('  ') is True", "assert is_blank(' a ') is False"),
    ),
    (
        "chunks",
        "def chunks(items, size):\n    return [items[i:i + size] for i in range(0, len(items), size)]\n",
        ("assert chunks([1, 2, 3], 2) == [[1, 2], [3]]", "assert chunks([], 2) == []"),
    ),
    (
        "percent",
        "def percent(part, whole):\n    return 100 * part / whole if whole else 0.0\n",
        ("assert percent(1, 4) == 25.0", "assert percent(1, 0) == 0.0"),
    ),
    (
        "slug",
        "def slug(text):\n    return '-'.join(text.lower().split())\n",
        ("assert slug('Hello  World') == 'hello-world'",),
    ),
)


@dataclass
class Repo:
    files: dict[str, str]  # the workspace, test files included
    tests: dict[str, str]  # the hidden tests the grade runs: {path: text}, copies of the visible ones
    bugs: list[tuple[str, Bug]]  # (source path, bug)
    test_files: list[str]


def _test_function(name: str, asserts: tuple[str, ...]) -> str:
    return f"def test_{name}():\n" + "".join(f"    {a}\n" for a in asserts)


def repo(rng: Random, n_bugs: int, n_clean: int = 1, readme: str = "") -> Repo:
    """A small package with ``n_bugs`` modules holding one bug each and ``n_clean`` correct ones,
    and a real pytest file per module whose assertions fail on the bug."""
    mods = rng.sample(MODULES, n_bugs + n_clean)
    kinds = rng.sample(range(BUG_KINDS), n_bugs)
    files = {
        "README.md": readme
        or f"# {rng.choice(['ledgerly', 'stockpile', 'tally', 'relay'])}\n\nRun the tests with `pytest`.\n",
        "src/__init__.py": "",
    }
    tests: dict[str, str] = {}
    bugs, test_files = [], []
    for i, mod in enumerate(mods):
        helper, helper_code, helper_asserts = rng.choice(HELPERS)
        src, test_path = f"src/{mod}.py", f"tests/test_{mod}.py"
        body = [f'"""{mod.capitalize()} helpers."""\n']
        names = [helper]
        functions = []
        if i < n_bugs:
            bug = _bug(kinds[i], rng)
            bugs.append((src, bug))
            body.append(bug.code)
            names[:0] = list(bug.names or (bug.fn,))
            functions.append(_test_function(bug.fn, bug.asserts))
        body.append(helper_code)
        functions.append(_test_function(helper, helper_asserts))
        files[src] = "\n\n".join(body)
        text = f"import pytest\n\nfrom src.{mod} import {', '.join(names)}\n\n\n" + "\n\n".join(functions)
        files[test_path] = tests[test_path] = text
        test_files.append(test_path)
    return Repo(files, tests, bugs, test_files)
