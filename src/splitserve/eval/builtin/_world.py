"""Seeded sandbox worlds: database tables, config files, small buggy Python repositories."""

from __future__ import annotations

import re
from dataclasses import dataclass
from random import Random
from typing import Any

from ._common import CITIES, DEPARTMENTS, FIRST, LAST, ORDER_STATES, PRODUCTS, person


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
    fn: str
    code: str
    find: str
    replace: str
    must_match: list[str]
    must_not_contain: list[str]
    message: str
    symptom: str
    must_contain: tuple[str, ...] = ()


def _bug(kind: int, rng: Random) -> Bug:
    if kind == 0:
        fn = rng.choice(["add_totals", "combine_amounts", "sum_pair", "merge_counts"])
        return Bug(
            fn,
            f'def {fn}(a, b):\n    """Return the sum of a and b."""\n    return a - b\n',
            "return a - b",
            "return a + b",
            [r"return\s+(?:a\s*\+\s*b|b\s*\+\s*a)\b"],
            ["a - b"],
            f"AssertionError: assert {fn}(2, 3) == 5 (got -1)",
            "returns the difference instead of the sum",
        )
    if kind == 1:
        fn = rng.choice(["sum_to", "total_upto", "triangular"])
        return Bug(
            fn,
            f'def {fn}(n):\n    """Return 1 + 2 + ... + n."""\n    return sum(range(1, n))\n',
            "range(1, n)",
            "range(1, n + 1)",
            [r"range\(\s*1\s*,\s*n\s*\+\s*1\s*\)|n\s*\*\s*\(\s*n\s*\+\s*1\s*\)\s*//\s*2"],
            ["range(1, n))"],
            f"AssertionError: assert {fn}(4) == 10 (got 6)",
            "leaves n itself out of the sum",
        )
    if kind == 2:
        fn, limit = rng.choice(["is_adult", "can_vote", "is_eligible"]), rng.choice([16, 18, 21])
        return Bug(
            fn,
            f'def {fn}(age):\n    """True for people aged {limit} or older."""\n    return age > {limit}\n',
            f"age > {limit}",
            f"age >= {limit}",
            [rf"age\s*>=\s*{limit}\b|\b{limit}\s*<=\s*age"],
            [f"age > {limit}"],
            f"AssertionError: assert {fn}({limit}) is True (got False)",
            f"rejects people who are exactly {limit}",
        )
    if kind == 3:
        fn = rng.choice(["parse_int", "to_int", "read_number"])
        return Bug(
            fn,
            f'def {fn}(text):\n    """Parse a signed integer such as \'-42\'."""\n'
            f"    return int(text.lstrip('-+'))\n",
            "int(text.lstrip('-+'))",
            "int(text)",
            [r"int\(\s*text(?:\.strip\(\))?\s*\)"],
            ["lstrip('-+')"],
            f"AssertionError: assert {fn}('-3') == -3 (got 3)",
            "drops the minus sign of negative numbers",
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
            [rf"(?m)^{name}\s*=\s*{right}\b"],
            [],
            f"AssertionError: assert {name} == {right} (got {wrong})",
            f"uses {wrong} for {name} although the documented default is {right}",
        )
    if kind == 5:
        fn = rng.choice(["normalize_code", "canonical_sku", "clean_tag"])
        return Bug(
            fn,
            f'def {fn}(code):\n    """Codes are stored in upper case, without surrounding '
            'spaces."""\n'
            "    return code.strip().lower()\n",
            "code.strip().lower()",
            "code.strip().upper()",
            [],
            ["code.strip().lower()"],
            f"AssertionError: assert {fn}(' ab12 ') == 'AB12' (got 'ab12')",
            "lower-cases the code",
            (".upper()",),
        )
    if kind == 6:
        fn = rng.choice(["mean", "average", "mean_latency"])
        return Bug(
            fn,
            f'def {fn}(values):\n    """Arithmetic mean of a non-empty list."""\n'
            "    return sum(values) // len(values)\n",
            "//",
            "/",
            [r"sum\(values\)\s*/\s*len\(values\)"],
            ["//"],
            f"AssertionError: assert {fn}([1, 2]) == 1.5 (got 1)",
            "rounds the mean down",
        )
    if kind == 7:
        fn = rng.choice(["last_item", "newest", "tail_value"])
        return Bug(
            fn,
            f'def {fn}(items):\n    """The last element of a non-empty list."""\n    return items[len(items)]\n',
            "items[len(items)]",
            "items[-1]",
            [r"items\[\s*-1\s*\]|items\[\s*len\(items\)\s*-\s*1\s*\]"],
            ["items[len(items)]"],
            "IndexError: list index out of range",
            "crashes with an IndexError",
        )
    fn = rng.choice(["apply_discount", "discounted", "sale_price"])
    return Bug(
        fn,
        f'def {fn}(price, percent):\n    """Price after a discount of `percent` percent (20 means '
        '20% off)."""\n'
        "    return price - price * percent\n",
        "price * percent",
        "price * percent / 100",
        [r"percent\s*/\s*100|/\s*100"],
        [],
        f"AssertionError: assert {fn}(50, 20) == 40 (got -950)",
        "treats the percentage as a fraction",
    )


BUG_KINDS = 9
MODULES = (
    "billing",
    "parser",
    "pricing",
    "accounts",
    "metrics",
    "stock",
    "reports",
    "scheduler",
    "geo",
    "ledger",
    "catalog",
    "alerts",
)
HELPERS = (
    ("clamp", "def clamp(value, low, high):\n    return max(low, min(high, value))\n"),
    ("is_blank", "def is_blank(text):\n    return not text.strip()\n"),
    (
        "chunks",
        "def chunks(items, size):\n    return [items[i:i + size] for i in range(0, len(items), size)]\n",
    ),
    ("percent", "def percent(part, whole):\n    return 100 * part / whole if whole else 0.0\n"),
    ("slug", "def slug(text):\n    return '-'.join(text.lower().split())\n"),
)


@dataclass
class Repo:
    files: dict[str, str]
    tests: list[dict[str, Any]]
    bugs: list[tuple[str, Bug]]  # (source path, bug)
    test_files: list[str]


def repo(rng: Random, n_bugs: int, n_clean: int = 1, readme: str = "") -> Repo:
    """A small package with ``n_bugs`` modules holding one bug each and ``n_clean`` correct ones."""
    mods = rng.sample(MODULES, n_bugs + n_clean)
    kinds = rng.sample(range(BUG_KINDS), n_bugs)
    files = {
        "README.md": readme
        or f"# {rng.choice(['ledgerly', 'stockpile', 'tally', 'relay'])}\n\nRun the tests with `pytest`.\n"
    }
    tests: list[dict[str, Any]] = []
    bugs, test_files = [], []
    for i, mod in enumerate(mods):
        helper, helper_code = rng.choice(HELPERS)
        src, test_path = f"src/{mod}.py", f"tests/test_{mod}.py"
        body = [f'"""{mod.capitalize()} helpers."""\n']
        names = [helper]
        if i < n_bugs:
            bug = _bug(kinds[i], rng)
            bugs.append((src, bug))
            body.append(bug.code)
            names.insert(0, bug.fn)
            tests.append(
                {
                    "name": f"test_{bug.fn}",
                    "file": src,
                    "path": test_path,
                    "must_match": bug.must_match,
                    "must_not_contain": bug.must_not_contain,
                    "must_contain": list(bug.must_contain),
                    "message": bug.message,
                }
            )
        body.append(helper_code)
        files[src] = "\n\n".join(body)
        tests.append(
            {
                "name": f"test_{helper}",
                "file": src,
                "path": test_path,
                "must_contain": f"def {helper}(",
            }
        )
        files[test_path] = f"from src.{mod} import {', '.join(names)}\n\n\n" + "\n\n".join(
            f"def test_{n}():\n    ...  # see the assertion in the failure message\n" for n in names
        )
        test_files.append(test_path)
    return Repo(files, tests, bugs, test_files)
