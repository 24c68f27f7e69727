"""The lookup tools of the built-in suite, as typed functions of the ``BUILTIN`` toolset
(``.._catalog``): the catalogue a template offers its needed tools and distractors from.

The functions are never run: each scenario's ``tool_responses`` rules answer their calls.
"""

from __future__ import annotations

from .._catalog import Toolset

BUILTIN = Toolset("builtin")


@BUILTIN.tool
def get_weather(*, location: str) -> None:
    """Current weather in a city: temperature in °C and conditions."""


@BUILTIN.tool
def get_weather_forecast(*, location: str, days: int | None = None) -> None:
    """Weather forecast for the coming days of a city (not the current weather)."""


@BUILTIN.tool
def get_air_quality(*, city: str) -> None:
    """Current air quality index (AQI) of a city."""


@BUILTIN.tool
def get_local_time(*, city: str) -> None:
    """Current local time (24-hour HH:MM) in a city."""


@BUILTIN.tool
def get_stock_price(*, symbol: str) -> None:
    """Current stock price for a ticker symbol."""


@BUILTIN.tool
def get_stock_history(*, symbol: str, days: int | None = None) -> None:
    """Daily closing prices of a stock over the past days (not the live price)."""


@BUILTIN.tool
def get_exchange_rate(*, base: str, quote: str) -> None:
    """Current exchange rate from one currency to another."""


@BUILTIN.tool
def get_order_status(*, order_id: str) -> None:
    """Status of one customer order, by order id."""


@BUILTIN.tool
def get_order_history(*, customer: str) -> None:
    """All past orders of a customer, by customer name."""


@BUILTIN.tool
def track_package(*, tracking_number: str) -> None:
    """Where a parcel is now, by carrier tracking number."""


@BUILTIN.tool
def get_employee(*, name: str) -> None:
    """Company directory entry of one employee, by full name."""


@BUILTIN.tool
def search_employees(*, department: str) -> None:
    """List the employees of a department."""


@BUILTIN.tool
def get_flight_status(*, flight: str) -> None:
    """Live status of a flight by flight number: status, gate, departure time."""


@BUILTIN.tool
def search_flights(*, from_: str, to: str, date: str) -> None:
    """Search bookable flights between two cities on a date."""


@BUILTIN.tool
def get_inventory(*, sku: str) -> None:
    """Units in stock of a product, by SKU."""


@BUILTIN.tool
def get_inventory_history(*, sku: str) -> None:
    """Monthly stock movements of a product (not the current stock), by SKU."""


@BUILTIN.tool
def send_email(*, to: str, subject: str, body: str) -> None:
    """Send an email."""


@BUILTIN.tool
def create_ticket(*, title: str, description: str | None = None, priority: str | None = None) -> None:
    """Open a support ticket."""


@BUILTIN.tool
def add_calendar_event(*, title: str, start: str) -> None:
    """Add an event to the calendar."""


@BUILTIN.tool
def translate_text(*, text: str, target_language: str) -> None:
    """Translate text into another language."""


@BUILTIN.tool
def calculator(*, expression: str) -> None:
    """Evaluate an arithmetic expression."""


@BUILTIN.tool
def search_documents(*, query: str) -> None:
    """Full-text search over the company's document archive."""


@BUILTIN.tool
def transfer_funds(*, from_account: str, to_account: str, amount: float) -> None:
    """Move money between accounts."""


@BUILTIN.tool
def delete_user(*, user_id: str) -> None:
    """Delete a user account permanently."""


@BUILTIN.tool
def get_user(*, user_id: str) -> None:
    """Look up a user account by id."""


@BUILTIN.tool
def send_sms(*, to: str, text: str) -> None:
    """Send a text message to a phone number."""


@BUILTIN.tool
def get_product_info(*, name: str) -> None:
    """Catalog entry of a product by name: description, price, release date."""
