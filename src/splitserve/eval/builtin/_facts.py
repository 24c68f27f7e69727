"""Seeded lookups: one fact a mock tool knows, with the rule that answers it and the checks
that prove an answer used it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from ._common import (
    AIRLINES,
    CARRIERS,
    CITIES,
    COMPANIES,
    CONDITIONS,
    CURRENCIES,
    DEPARTMENTS,
    FLIGHT_STATES,
    ORDER_STATES,
    PRODUCTS,
    call,
    check,
    person,
    rx_word,
)


@dataclass
class Fact:
    tool: str
    args: dict[str, Any]  # what the ideal call passes
    match: dict[str, Any]  # the rule's match: lenient regexes on the key argument
    result: dict[str, Any]  # what the tool answers
    ask: str  # the question, as a user asks it
    answer: str  # the answer, as one sentence
    checks: list[dict[str, Any]]  # response checks that pass iff the answer used the result
    fields: dict[str, Any]  # the answer as JSON fields (for json_output)
    entity: str
    near: str | None = None  # a tool with a confusable purpose
    extra: dict[str, Any] = field(default_factory=dict)  # values a second hop needs

    def rule(self) -> dict[str, Any]:
        return {"match": self.match, "returns": self.result}

    def call(self) -> dict[str, Any]:
        return call(self.tool, **self.args)

    def arg_check(self) -> dict[str, Any]:
        key, pattern = next(iter(self.match.items()))
        return check("tool_args_match_regex", tool=self.tool, arg=key.removesuffix("_regex"), pattern=pattern)


def _price(rng: Random, lo: int, hi: int) -> float:
    """A price with two decimals whose last digit is not 0 (so it reads back the same)."""
    return rng.randint(lo, hi) + rng.choice([1, 3, 7, 9]) / 100 + rng.randint(0, 9) / 10


def weather(rng: Random, city: str | None = None) -> Fact:
    city = city or rng.choice(CITIES)
    t = rng.randint(1, 34)
    cond = rng.choice([c for c in CONDITIONS if t <= 3 or c != "snow showers"])
    return Fact(
        "get_weather",
        {"location": city},
        {"location_regex": rx_word(city)},
        {"location": city, "temp_c": t, "condition": cond, "humidity_pct": rng.randint(40, 95)},
        rng.choice(
            [
                f"What's the temperature in {city} right now?",
                f"How warm is it in {city} at the moment?",
                f"What is the current temperature in {city}?",
            ]
        ),
        f"It is {t} °C and {cond} in {city}.",
        [check("response_contains", patterns=[str(t)])],
        {"temp_c": t, "condition": cond},
        city,
        "get_weather_forecast",
    )


def air_quality(rng: Random, city: str | None = None) -> Fact:
    city = city or rng.choice(CITIES)
    aqi = rng.randint(12, 240)
    band = "good" if aqi <= 50 else "moderate" if aqi <= 100 else "unhealthy"
    return Fact(
        "get_air_quality",
        {"city": city},
        {"city_regex": rx_word(city)},
        {"city": city, "aqi": aqi, "category": band},
        rng.choice(
            [
                f"What's the air quality index in {city} now?",
                f"How is the air in {city} today (AQI)?",
            ]
        ),
        f"The AQI in {city} is {aqi} ({band}).",
        [check("response_contains", patterns=[str(aqi)])],
        {"aqi": aqi},
        city,
        "get_weather",
    )


def local_time(rng: Random, city: str | None = None) -> Fact:
    city = city or rng.choice(CITIES)
    hhmm = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    return Fact(
        "get_local_time",
        {"city": city},
        {"city_regex": rx_word(city)},
        {"city": city, "local_time": hhmm},
        f"What time is it in {city} right now (24-hour HH:MM)?",
        f"It is {hhmm} in {city}.",
        [check("response_contains", patterns=[hhmm])],
        {"local_time": hhmm},
        city,
    )


def stock(rng: Random, company: tuple[str, str] | None = None) -> Fact:
    name, ticker = company or rng.choice(COMPANIES)
    price = round(_price(rng, 12, 480), 2)
    return Fact(
        "get_stock_price",
        {"symbol": ticker},
        {"symbol_regex": rf"(?i)^\s*\$?{ticker}\s*$"},
        {"symbol": ticker, "price": price, "currency": "USD"},
        rng.choice(
            [
                f"What is {name}'s share price right now? The ticker is {ticker}.",
                f"How much does one {ticker} share ({name}) cost at the moment?",
            ]
        ),
        f"{name} ({ticker}) trades at {price} USD.",
        [check("response_number", equals=price, tolerance=0.005)],
        {"price": price},
        ticker,
        "get_stock_history",
    )


def exchange(rng: Random, pair: tuple[str, str] | None = None) -> Fact:
    base, quote = pair or tuple(rng.sample(CURRENCIES, 2))
    rate = round(rng.uniform(0.15, 4.8), 4)
    return Fact(
        "get_exchange_rate",
        {"base": base, "quote": quote},
        {"base_regex": rf"(?i)^\s*{base}\s*$", "quote_regex": rf"(?i)^\s*{quote}\s*$"},
        {"base": base, "quote": quote, "rate": rate},
        f"What is the exchange rate from {base} to {quote} right now?",
        f"1 {base} = {rate} {quote}.",
        [check("response_number", equals=rate, tolerance=0.006)],
        {"rate": rate},
        f"{base}/{quote}",
    )


def order(rng: Random, status: str | None = None) -> Fact:
    oid = f"A-{rng.randint(10000, 99999)}"
    status = status or rng.choice(ORDER_STATES)
    tracking = f"1Z{rng.randint(10**8, 10**9 - 1)}"
    return Fact(
        "get_order_status",
        {"order_id": oid},
        {"order_id_regex": oid[2:]},
        {
            "order_id": oid,
            "status": status,
            "carrier": rng.choice(CARRIERS),
            "tracking_number": tracking,
        },
        rng.choice([f"What's the status of my order {oid}?", f"Can you check where order {oid} stands?"]),
        f"Order {oid} is {status}.",
        [check("response_contains", patterns=[status])],
        {"status": status},
        oid,
        "get_order_history",
        {"tracking": tracking},
    )


def package(rng: Random, tracking: str | None = None) -> Fact:
    tracking = tracking or f"1Z{rng.randint(10**8, 10**9 - 1)}"
    city = rng.choice(CITIES)
    return Fact(
        "track_package",
        {"tracking_number": tracking},
        {"tracking_number_regex": tracking[2:]},
        {"tracking_number": tracking, "status": "in transit", "location": city},
        f"Where is parcel {tracking} right now?",
        f"Parcel {tracking} is in transit, currently in {city}.",
        [check("response_contains", patterns=[city])],
        {"location": city},
        tracking,
        "get_order_status",
    )


def employee(rng: Random, name: str | None = None, office: str | None = None, ask_email: bool | None = None) -> Fact:
    name = name or person(rng)
    office = office or rng.choice(CITIES)
    first, last = name.lower().split()
    email = f"{first}.{last}@{rng.choice(['corp', 'hq', 'staff'])}.example"
    dept = rng.choice(DEPARTMENTS)
    result = {"name": name, "department": dept, "office": office, "email": email}
    if ask_email if ask_email is not None else rng.random() < 0.5:
        return Fact(
            "get_employee",
            {"name": name},
            {"name_regex": rx_word(name.split()[1])},
            result,
            f"What is {name}'s work email address?",
            f"{name}'s email is {email}.",
            [check("response_contains", patterns=[email])],
            {"email": email},
            name,
            "search_employees",
        )
    return Fact(
        "get_employee",
        {"name": name},
        {"name_regex": rx_word(name.split()[1])},
        result,
        f"Which office does {name} work in?",
        f"{name} works in the {office} office ({dept}).",
        [check("response_contains", patterns=[office])],
        {"office": office},
        name,
        "search_employees",
        {"office": office},
    )


def flight(rng: Random, destination: str | None = None) -> Fact:
    code = f"{rng.choice(AIRLINES)}{rng.randint(100, 999)}"
    gate = f"{rng.choice('ABCDEF')}{rng.randint(2, 48)}"
    status = rng.choice(FLIGHT_STATES[:3])
    dest = destination or rng.choice(CITIES)
    dep = f"{rng.randint(5, 22):02d}:{rng.choice([5, 15, 25, 35, 45, 55]):02d}"
    return Fact(
        "get_flight_status",
        {"flight": code},
        {"flight_regex": rf"(?i){code[:2]}\s*{code[2:]}"},
        {"flight": code, "status": status, "gate": gate, "departure": dep, "destination": dest},
        f"Which gate does flight {code} leave from?",
        f"Flight {code} ({status}) leaves from gate {gate}.",
        [check("response_contains", patterns=[gate])],
        {"gate": gate},
        code,
        "search_flights",
        {"destination": dest},
    )


def inventory(rng: Random) -> Fact:
    product = rng.choice(PRODUCTS)
    sku = f"{product[:3].upper()}-{rng.randint(1000, 9999)}"
    n = rng.randint(3, 950)
    where = rng.choice(CITIES)
    return Fact(
        "get_inventory",
        {"sku": sku},
        {"sku_regex": sku[-4:]},
        {"sku": sku, "product": product, "in_stock": n, "warehouse": where},
        f"How many units of {sku} ({product}) do we have in stock?",
        f"We have {n} units of {sku} in stock.",
        [check("response_contains", patterns=[str(n)])],
        {"in_stock": n},
        sku,
        "get_inventory_history",
    )


KINDS: tuple[Callable[[Random], Fact], ...] = (
    weather,
    stock,
    order,
    employee,
    flight,
    inventory,
    exchange,
    air_quality,
    package,
    local_time,
)


def two_hop(rng: Random, k: int) -> tuple[Fact, Fact, str]:
    """A lookup whose answer names the key of a second lookup; and the question that needs both."""
    variant = k % 3
    if variant == 0:
        city = rng.choice(CITIES)
        first = employee(rng, office=city, ask_email=False)
        second = weather(rng, city)
        return (
            first,
            second,
            f"What's the temperature right now in the city where {first.entity} works?",
        )
    if variant == 1:
        first = order(rng, status="shipped")
        second = package(rng, first.extra["tracking"])
        return first, second, f"My order {first.entity} has shipped. Where is the parcel right now?"
    city = rng.choice(CITIES)
    first = flight(rng, destination=city)
    second = local_time(rng, city)
    return (
        first,
        second,
        (f"What is the local time right now (24-hour HH:MM) at the destination of flight {first.entity}?"),
    )
