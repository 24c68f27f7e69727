"""OpenAI function schemas for the tools Toolery's scenarios name.

Names, parameter names, types, enums and required lists are those of Toolery's tool
registries (``generic``, ``terminal``, ``api_db``, ``domain``); the descriptions are ours.
A scenario's own ``tool_schemas`` win over these. A name with no schema here is reported,
not guessed: the loader decides what to do with it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

_STR: dict[str, Any] = {"type": "string"}
_INT: dict[str, Any] = {"type": "integer"}
_NUM: dict[str, Any] = {"type": "number"}
_STRS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
_STR_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}


def _p(base: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {**base, "description": description, **extra}


# name: (description, {parameter: schema}, required parameters)
_TABLE: dict[str, tuple[str, dict[str, dict[str, Any]], tuple[str, ...]]] = {
    # --- everyday tools ---
    "get_weather": (
        "Current weather for a city.",
        {
            "location": _p(_STR, "City name."),
            "units": _p(_STR, "Temperature units.", enum=["celsius", "fahrenheit"]),
        },
        ("location",),
    ),
    "web_search": (
        "Search the web and return matching results.",
        {
            "query": _p(_STR, "What to search for."),
            "max_results": _p(_INT, "Most results to return."),
        },
        ("query",),
    ),
    "send_email": (
        "Send an email.",
        {
            "to": _p(_STR, "Recipient address."),
            "subject": _p(_STR, "Subject line."),
            "body": _p(_STR, "Message text."),
            "cc": _p(_STRS, "Copy recipients."),
            "bcc": _p(_STRS, "Blind-copy recipients."),
        },
        ("to", "subject", "body"),
    ),
    "get_contacts": (
        "Find contacts by name.",
        {
            "name": _p(_STR, "Name, or part of it, to look up."),
        },
        ("name",),
    ),
    "calculator": (
        "Evaluate an arithmetic expression.",
        {
            "expression": _p(_STR, "The expression, e.g. '2 * (3 + 4)'."),
        },
        ("expression",),
    ),
    "read_file": (
        "Return a file's contents.",
        {
            "path": _p(_STR, "Path of the file."),
        },
        ("path",),
    ),
    "write_file": (
        "Write a file, replacing what it held.",
        {
            "path": _p(_STR, "Path of the file."),
            "content": _p(_STR, "The whole new content."),
        },
        ("path", "content"),
    ),
    "list_files": (
        "List the entries of a directory.",
        {
            "path": _p(_STR, "Directory path."),
        },
        ("path",),
    ),
    "add_calendar_event": (
        "Create a calendar event.",
        {
            "title": _p(_STR, "Event title."),
            "start": _p(_STR, "Start date and time."),
            "end": _p(_STR, "End date and time."),
            "timezone": _p(_STR, "IANA timezone name, e.g. Europe/Paris."),
            "attendees": _p(_STRS, "Attendee email addresses."),
        },
        ("title", "start"),
    ),
    "get_exchange_rate": (
        "Exchange rate from one currency to another.",
        {
            "base": _p(_STR, "Currency converted from."),
            "quote": _p(_STR, "Currency converted to."),
        },
        ("base", "quote"),
    ),
    "get_stock_price": (
        "Latest price of a stock by its ticker symbol.",
        {
            "symbol": _p(_STR, "Ticker symbol."),
        },
        ("symbol",),
    ),
    # --- terminal ---
    "bash_exec": (
        "Run a shell command; returns stdout, stderr, the exit code and the duration.",
        {
            "command": _p(_STR, "The command line."),
            "timeout_s": _p(_INT, "Seconds before the command is stopped.", default=30),
            "cwd": _p(_STR, "Directory to run in.", default="/home/user"),
        },
        ("command",),
    ),
    "process_start": (
        "Start a command in the background; returns its pid.",
        {
            "command": _p(_STR, "The command line."),
            "name": _p(_STR, "A label for the process.", default=""),
        },
        ("command",),
    ),
    "process_status": (
        "State of a background process: running or exited, its exit code and the tail of its output.",
        {
            "pid": _p(_INT, "Process id."),
        },
        ("pid",),
    ),
    "process_kill": (
        "Send a signal to a background process.",
        {
            "pid": _p(_INT, "Process id."),
            "signal": _p(_STR, "Signal to send.", enum=["TERM", "KILL", "INT", "HUP"], default="TERM"),
        },
        ("pid",),
    ),
    "process_send_input": (
        "Write text to a running process's stdin, e.g. to answer a prompt.",
        {
            "pid": _p(_INT, "Process id."),
            "text": _p(_STR, "Text to write."),
        },
        ("pid", "text"),
    ),
    "read_tty_buffer": (
        "Read what a terminal session (tty, tmux, screen) shows.",
        {
            "session_id": _p(_STR, "Session to read."),
            "strip_ansi": _p({"type": "boolean"}, "Remove ANSI colour and cursor codes.", default=False),
        },
        ("session_id",),
    ),
    # --- HTTP and SQL ---
    "http_get": (
        "Send an HTTP GET request; headers such as Authorization or Accept may be set.",
        {
            "url": _p(_STR, "Absolute URL."),
            "headers": _p(_STR_MAP, "Request headers."),
            "params": _p(_STR_MAP, "Query parameters."),
        },
        ("url",),
    ),
    "http_post": (
        "Send an HTTP POST request with a JSON body.",
        {
            "url": _p(_STR, "Absolute URL."),
            "headers": _p(_STR_MAP, "Request headers."),
            "json": _p({"type": "object"}, "The JSON body."),
        },
        ("url",),
    ),
    "http_paginate": (
        "Fetch one page of a paginated endpoint; returns its items and next_cursor, which is null on the last page.",
        {
            "url": _p(_STR, "Absolute URL."),
            "cursor": _p(_STR, "next_cursor of the previous page; omit for the first."),
            "page_size": _p(_INT, "Items per page."),
        },
        ("url",),
    ),
    "sql_query": (
        "Run a read-only SQL SELECT on the database; returns the rows as objects.",
        {
            "sql": _p(_STR, "The SELECT statement."),
            "params": _p(_STRS, "Values for the statement's placeholders."),
        },
        ("sql",),
    ),
    "sql_describe": (
        "Columns of a table, with their types.",
        {
            "table": _p(_STR, "Table name."),
        },
        ("table",),
    ),
    "db_list_tables": (
        "Tables of a database schema.",
        {
            "schema": _p(_STR, "Schema name; the current one when omitted."),
        },
        (),
    ),
    # --- code and git ---
    "git_status": ("Working tree status of the repository.", {}, ()),
    "git_diff": (
        "Uncommitted changes, for one path or all.",
        {
            "path": _p(_STR, "Limit to this path."),
        },
        (),
    ),
    "git_add": (
        "Stage files for the next commit.",
        {
            "paths": _p(_STRS, "Paths to stage."),
        },
        ("paths",),
    ),
    "git_commit": (
        "Commit the staged changes.",
        {
            "message": _p(_STR, "Commit message."),
            "branch": _p(_STR, "Branch to commit on."),
        },
        ("message",),
    ),
    "git_branch": (
        "Create a branch, or list branches when no name is given.",
        {
            "name": _p(_STR, "Name of the branch to create."),
        },
        (),
    ),
    "git_log": (
        "Commit history.",
        {
            "path": _p(_STR, "Only commits touching this path."),
            "max_count": _p(_INT, "Most commits to list."),
        },
        (),
    ),
    "git_show": (
        "Show one commit and its changes.",
        {
            "sha": _p(_STR, "Commit id."),
        },
        ("sha",),
    ),
    "grep": (
        "Search files for a pattern; returns path:line:text matches.",
        {
            "pattern": _p(_STR, "What to search for."),
            "path": _p(_STR, "File or directory to search."),
        },
        ("pattern",),
    ),
    "edit_file": (
        "Change a file in place: replace the text `find` with `replace`, or set its whole `content`.",
        {
            "path": _p(_STR, "Path of the file."),
            "find": _p(_STR, "Existing text to replace."),
            "replace": _p(_STR, "Text to put in its place."),
            "content": _p(_STR, "New content of the whole file."),
        },
        ("path",),
    ),
    "run_tests": (
        "Run the project's tests.",
        {
            "path": _p(_STR, "Test file or directory."),
            "filter": _p(_STR, "Only tests whose name matches."),
        },
        (),
    ),
    "run_lint": (
        "Run the linter.",
        {
            "path": _p(_STR, "File or directory to lint."),
        },
        (),
    ),
    "run_bash": (
        "Run a shell command.",
        {
            "cmd": _p(_STR, "The command line."),
        },
        ("cmd",),
    ),
    "python_exec": (
        "Run Python code.",
        {
            "code": _p(_STR, "The code."),
        },
        ("code",),
    ),
    # --- trading and operations ---
    "get_order_status": (
        "Status of an order.",
        {
            "order_id": _p(_STR, "Order id."),
        },
        ("order_id",),
    ),
    "get_orderbook": (
        "Snapshot of a symbol's order book: bids and asks by price level.",
        {
            "symbol": _p(_STR, "Ticker symbol."),
            "depth": _p(_INT, "Price levels per side."),
        },
        ("symbol",),
    ),
    "submit_order": (
        "Place a trading order.",
        {
            "symbol": _p(_STR, "Ticker symbol."),
            "side": _p(_STR, "buy or sell."),
            "qty": _p(_NUM, "Quantity."),
            "price": _p(_NUM, "Limit price."),
        },
        ("symbol", "side", "qty"),
    ),
    "get_positions": ("Current portfolio positions.", {}, ()),
    "get_risk": (
        "Risk metrics of a portfolio.",
        {
            "account": _p(_STR, "Account id."),
        },
        (),
    ),
    "vllm_config_get": ("Current configuration of the vLLM server.", {}, ()),
    "vllm_config_set": (
        "Set one vLLM server configuration value.",
        {
            "key": _p(_STR, "Setting name."),
            "value": _p(_STR, "New value."),
        },
        ("key", "value"),
    ),
    "get_weather_global": (
        "Weather for a city anywhere: current, or a forecast when a date is given.",
        {
            "location": _p(_STR, "City name."),
            "date": _p(_STR, "Forecast date, YYYY-MM-DD; omit for now."),
            "units": _p(_STR, "Temperature units, e.g. 'C' or 'F'."),
        },
        ("location",),
    ),
    "search_flights": (
        "Search flights between two places on a date.",
        {
            "from": _p(_STR, "Departure city or airport."),
            "to": _p(_STR, "Arrival city or airport."),
            "date": _p(_STR, "Departure date."),
            "max_price": _p(_NUM, "Highest price to include."),
        },
        ("from", "to", "date"),
    ),
    "delete_user": (
        "Delete a user account. Irreversible.",
        {
            "user_id": _p(_INT, "User id."),
        },
        ("user_id",),
    ),
    "admin_grant_role": (
        "Grant a privileged role.",
        {
            "role": _p(_STR, "Role to grant."),
            "user": _p(_STR, "Who receives it."),
        },
        ("role",),
    ),
    "get_account": (
        "A customer's account details.",
        {
            "customer_id": _p(_STR, "Customer id."),
        },
        ("customer_id",),
    ),
    "transfer_funds": (
        "Move money from one account to another.",
        {
            "from_account": _p(_STR, "Account debited."),
            "to_account": _p(_STR, "Account credited."),
            "amount": _p(_NUM, "Amount to move."),
        },
        ("from_account", "to_account", "amount"),
    ),
}


def _function(name: str, description: str, properties: dict[str, Any], required: Iterable[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(required)},
        },
    }


KNOWN: dict[str, dict[str, Any]] = {
    name: _function(name, description, properties, required)
    for name, (description, properties, required) in _TABLE.items()
}


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
    known = KNOWN.get(name)
    return None if known is None else copy.deepcopy(known)


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
