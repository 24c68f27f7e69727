"""The tools of Toolery's registries (``generic``, ``terminal``, ``api_db``, ``domain``), as
typed functions of the ``TOOLERY`` toolset (``_catalog``): a scenario file may name them
without giving a schema.

Names, parameter names, types, enums and required lists are Toolery's; the descriptions are
ours. A scenario's own ``tool_schemas`` win over these. A name with no schema here is
reported, not guessed: the loader decides what to do with it. The functions are never run:
the scenario's ``tool_responses`` rules answer their calls (``_mock``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Literal

from ._catalog import Toolset

TOOLERY = Toolset("toolery")

# --- everyday tools ---


@TOOLERY.tool
def get_weather(*, location: str, units: Literal["celsius", "fahrenheit"] | None = None) -> None:
    """Current weather for a city.

    Args:
        location: City name.
        units: Temperature units.
    """


@TOOLERY.tool
def web_search(*, query: str, max_results: int | None = None) -> None:
    """Search the web and return matching results.

    Args:
        query: What to search for.
        max_results: Most results to return.
    """


@TOOLERY.tool
def send_email(
    *,
    to: str,
    subject: str,
    body: str,
    cc: list[str] | None = None,
    bcc: list[str] | None = None,
) -> None:
    """Send an email.

    Args:
        to: Recipient address.
        subject: Subject line.
        body: Message text.
        cc: Copy recipients.
        bcc: Blind-copy recipients.
    """


@TOOLERY.tool
def get_contacts(*, name: str) -> None:
    """Find contacts by name.

    Args:
        name: Name, or part of it, to look up.
    """


@TOOLERY.tool
def calculator(*, expression: str) -> None:
    """Evaluate an arithmetic expression.

    Args:
        expression: The expression, e.g. '2 * (3 + 4)'.
    """


@TOOLERY.tool
def read_file(*, path: str) -> None:
    """Return a file's contents.

    Args:
        path: Path of the file.
    """


@TOOLERY.tool
def write_file(*, path: str, content: str) -> None:
    """Write a file, replacing what it held.

    Args:
        path: Path of the file.
        content: The whole new content.
    """


@TOOLERY.tool
def list_files(*, path: str) -> None:
    """List the entries of a directory.

    Args:
        path: Directory path.
    """


@TOOLERY.tool
def add_calendar_event(
    *,
    title: str,
    start: str,
    end: str | None = None,
    timezone: str | None = None,
    attendees: list[str] | None = None,
) -> None:
    """Create a calendar event.

    Args:
        title: Event title.
        start: Start date and time.
        end: End date and time.
        timezone: IANA timezone name, e.g. Europe/Paris.
        attendees: Attendee email addresses.
    """


@TOOLERY.tool
def get_exchange_rate(*, base: str, quote: str) -> None:
    """Exchange rate from one currency to another.

    Args:
        base: Currency converted from.
        quote: Currency converted to.
    """


@TOOLERY.tool
def get_stock_price(*, symbol: str) -> None:
    """Latest price of a stock by its ticker symbol.

    Args:
        symbol: Ticker symbol.
    """


@TOOLERY.tool
def bash_exec(*, command: str, timeout_s: int = 30, cwd: str = "/home/user") -> None:
    """Run a shell command; returns stdout, stderr, the exit code and the duration.

    Args:
        command: The command line.
        timeout_s: Seconds before the command is stopped.
        cwd: Directory to run in.
    """


@TOOLERY.tool
def process_start(*, command: str, name: str = "") -> None:
    """Start a command in the background; returns its pid.

    Args:
        command: The command line.
        name: A label for the process.
    """


@TOOLERY.tool
def process_status(*, pid: int) -> None:
    """State of a background process: running or exited, its exit code and the tail of its output.

    Args:
        pid: Process id.
    """


@TOOLERY.tool
def process_kill(*, pid: int, signal: Literal["TERM", "KILL", "INT", "HUP"] = "TERM") -> None:
    """Send a signal to a background process.

    Args:
        pid: Process id.
        signal: Signal to send.
    """


@TOOLERY.tool
def process_send_input(*, pid: int, text: str) -> None:
    """Write text to a running process's stdin, e.g. to answer a prompt.

    Args:
        pid: Process id.
        text: Text to write.
    """


@TOOLERY.tool
def read_tty_buffer(*, session_id: str, strip_ansi: bool = False) -> None:
    """Read what a terminal session (tty, tmux, screen) shows.

    Args:
        session_id: Session to read.
        strip_ansi: Remove ANSI colour and cursor codes.
    """


@TOOLERY.tool
def http_get(*, url: str, headers: dict[str, str] | None = None, params: dict[str, str] | None = None) -> None:
    """Send an HTTP GET request; headers such as Authorization or Accept may be set.

    Args:
        url: Absolute URL.
        headers: Request headers.
        params: Query parameters.
    """


@TOOLERY.tool
def http_post(*, url: str, headers: dict[str, str] | None = None, json: dict[str, Any] | None = None) -> None:
    """Send an HTTP POST request with a JSON body.

    Args:
        url: Absolute URL.
        headers: Request headers.
        json: The JSON body.
    """


@TOOLERY.tool
def http_paginate(*, url: str, cursor: str | None = None, page_size: int | None = None) -> None:
    """Fetch one page of a paginated endpoint; returns its items and next_cursor, which is null on the last page.

    Args:
        url: Absolute URL.
        cursor: next_cursor of the previous page; omit for the first.
        page_size: Items per page.
    """


@TOOLERY.tool
def sql_query(*, sql: str, params: list[str] | None = None) -> None:
    """Run a read-only SQL SELECT on the database; returns the rows as objects.

    Args:
        sql: The SELECT statement.
        params: Values for the statement's placeholders.
    """


@TOOLERY.tool
def sql_describe(*, table: str) -> None:
    """Columns of a table, with their types.

    Args:
        table: Table name.
    """


@TOOLERY.tool
def db_list_tables(*, schema: str | None = None) -> None:
    """Tables of a database schema.

    Args:
        schema: Schema name; the current one when omitted.
    """


@TOOLERY.tool
def git_status() -> None:
    """Working tree status of the repository."""


@TOOLERY.tool
def git_diff(*, path: str | None = None) -> None:
    """Uncommitted changes, for one path or all.

    Args:
        path: Limit to this path.
    """


@TOOLERY.tool
def git_add(*, paths: list[str]) -> None:
    """Stage files for the next commit.

    Args:
        paths: Paths to stage.
    """


@TOOLERY.tool
def git_commit(*, message: str, branch: str | None = None) -> None:
    """Commit the staged changes.

    Args:
        message: Commit message.
        branch: Branch to commit on.
    """


@TOOLERY.tool
def git_branch(*, name: str | None = None) -> None:
    """Create a branch, or list branches when no name is given.

    Args:
        name: Name of the branch to create.
    """


@TOOLERY.tool
def git_log(*, path: str | None = None, max_count: int | None = None) -> None:
    """Commit history.

    Args:
        path: Only commits touching this path.
        max_count: Most commits to list.
    """


@TOOLERY.tool
def git_show(*, sha: str) -> None:
    """Show one commit and its changes.

    Args:
        sha: Commit id.
    """


@TOOLERY.tool
def grep(*, pattern: str, path: str | None = None) -> None:
    """Search files for a pattern; returns path:line:text matches.

    Args:
        pattern: What to search for.
        path: File or directory to search.
    """


@TOOLERY.tool
def edit_file(
    *,
    path: str,
    find: str | None = None,
    replace: str | None = None,
    content: str | None = None,
) -> None:
    """Change a file in place: replace the text `find` with `replace`, or set its whole `content`.

    Args:
        path: Path of the file.
        find: Existing text to replace.
        replace: Text to put in its place.
        content: New content of the whole file.
    """


@TOOLERY.tool
def run_tests(*, path: str | None = None, filter: str | None = None) -> None:
    """Run the project's tests.

    Args:
        path: Test file or directory.
        filter: Only tests whose name matches.
    """


@TOOLERY.tool
def run_lint(*, path: str | None = None) -> None:
    """Run the linter.

    Args:
        path: File or directory to lint.
    """


@TOOLERY.tool
def run_bash(*, cmd: str) -> None:
    """Run a shell command.

    Args:
        cmd: The command line.
    """


@TOOLERY.tool
def python_exec(*, code: str) -> None:
    """Run Python code.

    Args:
        code: The code.
    """


@TOOLERY.tool
def get_order_status(*, order_id: str) -> None:
    """Status of an order.

    Args:
        order_id: Order id.
    """


@TOOLERY.tool
def get_orderbook(*, symbol: str, depth: int | None = None) -> None:
    """Snapshot of a symbol's order book: bids and asks by price level.

    Args:
        symbol: Ticker symbol.
        depth: Price levels per side.
    """


@TOOLERY.tool
def submit_order(*, symbol: str, side: str, qty: float, price: float | None = None) -> None:
    """Place a trading order.

    Args:
        symbol: Ticker symbol.
        side: buy or sell.
        qty: Quantity.
        price: Limit price.
    """


@TOOLERY.tool
def get_positions() -> None:
    """Current portfolio positions."""


@TOOLERY.tool
def get_risk(*, account: str | None = None) -> None:
    """Risk metrics of a portfolio.

    Args:
        account: Account id.
    """


@TOOLERY.tool
def vllm_config_get() -> None:
    """Current configuration of the vLLM server."""


@TOOLERY.tool
def vllm_config_set(*, key: str, value: str) -> None:
    """Set one vLLM server configuration value.

    Args:
        key: Setting name.
        value: New value.
    """


@TOOLERY.tool
def get_weather_global(*, location: str, date: str | None = None, units: str | None = None) -> None:
    """Weather for a city anywhere: current, or a forecast when a date is given.

    Args:
        location: City name.
        date: Forecast date, YYYY-MM-DD; omit for now.
        units: Temperature units, e.g. 'C' or 'F'.
    """


@TOOLERY.tool
def search_flights(*, from_: str, to: str, date: str, max_price: float | None = None) -> None:
    """Search flights between two places on a date.

    Args:
        from_: Departure city or airport.
        to: Arrival city or airport.
        date: Departure date.
        max_price: Highest price to include.
    """


@TOOLERY.tool
def delete_user(*, user_id: int) -> None:
    """Delete a user account. Irreversible.

    Args:
        user_id: User id.
    """


@TOOLERY.tool
def admin_grant_role(*, role: str, user: str | None = None) -> None:
    """Grant a privileged role.

    Args:
        role: Role to grant.
        user: Who receives it.
    """


@TOOLERY.tool
def get_account(*, customer_id: str) -> None:
    """A customer's account details.

    Args:
        customer_id: Customer id.
    """


@TOOLERY.tool
def transfer_funds(*, from_account: str, to_account: str, amount: float) -> None:
    """Move money from one account to another.

    Args:
        from_account: Account debited.
        to_account: Account credited.
        amount: Amount to move.
    """


def _normalized(name: str, schema: Any) -> dict[str, Any]:
    """A scenario schema as ``{"type": "function", "function": {...}}``: the bare
    ``{"name", "description", "parameters"}`` form is wrapped, the name filled in."""
    if not isinstance(schema, dict):
        raise TypeError(f"tool_schemas[{name!r}] must be a mapping, got {type(schema).__name__}")
    fn = copy.deepcopy(schema.get("function", schema))
    if not isinstance(fn, dict):
        raise TypeError(f"tool_schemas[{name!r}].function must be a mapping")
    fn.setdefault("name", name)
    return {"type": "function", "function": fn}


def schema_for(name: str, extra: dict[str, dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The schema of tool ``name`` (a copy): the scenario's own (``extra``) first, then ours;
    None when neither has it."""
    if extra and name in extra:
        return _normalized(name, extra[name])
    return TOOLERY.schema(name) if name in TOOLERY else None


def schemas_for(
    names: Iterable[str],
    extra: dict[str, dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Schemas for ``names`` in order (each name once), and the names that have none."""
    schemas: list[dict[str, Any]] = []
    missing: list[str] = []
    for name in dict.fromkeys(names):
        schema = schema_for(name, extra)
        if schema is None:
            missing.append(name)
        else:
            schemas.append(schema)
    return schemas, missing
