"""Pinot's ingestion transform expressions: one parser, and the registry of the functions the
Spark segment build can run. Shared by the build (`tables.segments.transforms`) and by table-config
validation on create and update (`tables.domain.table_config`).

Contract:
- `parse_expression(text)` reads a `transformFunction` into a small AST (`Expr`):
  `Literal` (numbers `12`, `-1.5`; single-quoted strings with `''` for a quote; `true`, `false`,
  `null`), `Column` (a bare identifier, dots allowed as in `a.b`, or back-quoted / double-quoted),
  and `Call` (a function name and its arguments, nested freely). Pinot's `Groovy({...}, args)` is
  recognised and refused with the reason that Groovy is disabled. `TransformExprError` on anything
  else.
- `canonical(name)`: function names compare like Pinot's: case-insensitive, underscores ignored.
- `FUNCTIONS`: canonical name -> `FunctionSpec` (Pinot's name, the argument counts it takes, the
  arguments that must be literals and of which kind). Only what the build runs is listed: a
  function missing here is refused, never half-run.
- `check_expression(expr)`: `TransformExprError` naming the first function that is unknown, called
  with a wrong number of arguments, or given a non-literal where the build needs a literal.
- `parse_transform(text)`: parse and check. `transform_config_problems(configs, columns)`: the
  problems of an `ingestionConfig.transformConfigs` list, one sentence each naming the column and
  the function (empty when every entry can run); `columns`, when given, are the schema's columns.
- Filters (`ingestionConfig.filterConfig.filterFunction`, Pinot's FilterTransformer: a row for
  which the function returns true is dropped at ingestion): the same parser and registry, which
  also lists Pinot's boolean scalar functions (`equals`, `notEquals`, `greaterThan`,
  `greaterThanOrEqual`, `lessThan`, `lessThanOrEqual`, `between`, `isNull`, `isNotNull`,
  `startsWith`) and the evaluator's `and`, `or` (2 to 32 arguments) and `not`.
  `parse_filter(text)` parses and checks one, and refuses a function whose top-level call cannot
  return a boolean (it would never drop a row: a mistake, not a filter); `filter_config_problems`
  gives the problems of a `filterConfig`, each naming `filterConfig` and the function.
- `complex_type_problems(config)`: the problems of an `ingestionConfig.complexTypeConfig` the
  build cannot honour (see `tables.segments.complex_types`).
Pure standard library, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BOOLEAN_FUNCTIONS",
    "COLLECTION_TO_JSON_MODES",
    "FILTER_WHERE",
    "FUNCTIONS",
    "GROOVY_DISABLED",
    "Call",
    "Column",
    "Expr",
    "FunctionSpec",
    "Literal",
    "TransformExprError",
    "canonical",
    "check_expression",
    "columns_of",
    "complex_type_problems",
    "filter_config_problems",
    "parse_expression",
    "parse_filter",
    "parse_transform",
    "supported_function_names",
    "transform_config_problems",
    "walk",
]

GROOVY_DISABLED = (
    "Groovy transform functions are disabled (Pinot's controller.disable.ingestion.groovy), and "
    "the Spark build cannot run Groovy"
)


class TransformExprError(ValueError):
    """A transform expression that cannot be parsed or run; `function` names the culprit."""

    def __init__(self, message: str, function: str | None = None) -> None:
        super().__init__(message)
        self.function = function


@dataclass(frozen=True)
class Literal:
    """A constant: int, float, str, bool or None (`null`)."""

    value: int | float | str | bool | None


@dataclass(frozen=True)
class Column:
    """A reference to an input field of the message."""

    name: str


@dataclass(frozen=True)
class Call:
    """`name(args...)`; `name` as written (see `canonical`)."""

    name: str
    args: tuple[Expr, ...] = ()

    @property
    def key(self) -> str:
        return canonical(self.name)


Expr = Literal | Column | Call


def canonical(name: str) -> str:
    """Pinot's canonical function name: lower case, underscores removed."""
    return name.replace("_", "").lower()


# --- parsing ------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(?P<ident>[A-Za-z_$][\w$.]*)"
    r"|`(?P<bq>[^`]+)`|\"(?P<dq>[^\"]+)\"|'(?P<str>(?:[^']|'')*)'|(?P<punct>[(),]))"
)
_GROOVY = re.compile(r"\s*groovy\s*\(", re.IGNORECASE)
_KEYWORDS: dict[str, bool | None] = {"true": True, "false": False, "null": None}


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise TransformExprError(f"cannot read {text[pos:]!r}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind in ("bq", "dq"):
            kind = "quoted"
        elif kind == "str":
            value = value.replace("''", "'")
        tokens.append((kind, value))
        pos = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise TransformExprError("the expression ends too early")
        self.pos += 1
        return token

    def expr(self) -> Expr:
        kind, value = self.take()
        if kind == "num":
            number = float(value) if any(c in value for c in ".eE") else int(value)
            return Literal(number)
        if kind == "str":
            return Literal(value)
        if kind == "quoted":
            return Column(value)
        if kind != "ident":
            raise TransformExprError(f"unexpected {value!r}")
        if self.peek() != ("punct", "("):
            if value.lower() in _KEYWORDS:
                return Literal(_KEYWORDS[value.lower()])
            return Column(value)
        self.take()
        args: list[Expr] = []
        if self.peek() == ("punct", ")"):
            self.take()
            return Call(value, ())
        while True:
            args.append(self.expr())
            separator = self.take()
            if separator == ("punct", ")"):
                return Call(value, tuple(args))
            if separator != ("punct", ","):
                raise TransformExprError(f"expected ',' or ')' in the call of {value}")


def parse_expression(text: str) -> Expr:
    """The AST of a transform expression (syntax only; see `check_expression`)."""
    if not isinstance(text, str) or not text.strip():
        raise TransformExprError("the transform function is empty")
    if _GROOVY.match(text):
        raise TransformExprError(GROOVY_DISABLED, "Groovy")
    parser = _Parser(_tokens(text))
    expr = parser.expr()
    if parser.peek() is not None:
        raise TransformExprError(f"unexpected {parser.peek()[1]!r} after the expression")  # type: ignore[index]
    return expr


# --- the registry -------------------------------------------------------------------------------

INT, STR, NUM, ANY = "a whole number", "a quoted string", "a number", "a literal"
MAX_LOGICAL_ARGS = 32  # and/or take two or more arguments (a bound keeps the arities finite)
#: Functions whose result is a boolean: the top-level call of a filter must be one of them.
BOOLEAN_FUNCTIONS = frozenset(
    {
        "equals",
        "notequals",
        "greaterthan",
        "greaterthanorequal",
        "lessthan",
        "lessthanorequal",
        "between",
        "isnull",
        "isnotnull",
        "startswith",
        "and",
        "or",
        "not",
    }
)


@dataclass(frozen=True)
class FunctionSpec:
    """A function the build runs: Pinot's name, its argument counts, and the arguments (by
    position) that must be literals of a kind (INT, STR, NUM or ANY)."""

    name: str
    arities: frozenset[int]
    literals: Mapping[int, str] = field(default_factory=dict)
    family: str = ""


def _specs() -> dict[str, FunctionSpec]:
    specs: list[tuple[tuple[str, ...], FunctionSpec]] = []

    def add(names: tuple[str, ...], arities: Iterable[int], family: str, **literals: str) -> None:
        spec = FunctionSpec(
            names[0], frozenset(arities), {int(k[1:]): v for k, v in literals.items()}, family
        )
        specs.append((names, spec))

    for names in (("plus", "add"), ("minus", "sub"), ("times", "mult"), ("divide", "div")):
        add(names, [2], "math")
    add(("mod",), [2], "math")
    for name in ("abs", "floor", "exp", "ln", "sqrt"):
        add((name,), [1], "math")
    add(("ceil", "ceiling"), [1], "math")
    add(("round",), [2], "math")
    for name in ("lower", "upper", "trim", "ltrim", "rtrim"):
        add((name,), [1], "string")
    add(("concat",), [2, 3], "string")
    add(("substr",), [2, 3], "string", a1=INT, a2=INT)
    add(("replace",), [3], "string")
    add(("regexpExtract",), [2, 3, 4], "string", a1=STR, a2=INT)
    add(("regexpReplace",), [3], "string", a1=STR)
    add(("split",), [2], "string", a1=STR)
    add(("startsWith",), [2], "string")
    add(("fromDateTime",), [2], "datetime", a1=STR)
    add(("toDateTime",), [2, 3], "datetime", a1=STR, a2=STR)
    for unit in ("Seconds", "Minutes", "Hours", "Days"):
        add((f"toEpoch{unit}",), [1], "datetime")
        add((f"toEpoch{unit}Rounded",), [2], "datetime")
        add((f"toEpoch{unit}Bucket",), [2], "datetime")
        add((f"fromEpoch{unit}",), [1], "datetime")
        add((f"fromEpoch{unit}Bucket",), [2], "datetime")
    add(("dateTrunc",), [2, 3, 4, 5], "datetime", a0=STR, a2=STR, a3=STR, a4=STR)
    add(("dateTimeConvert",), [4], "datetime", a1=STR, a2=STR, a3=STR)
    add(("now",), [0], "datetime")
    add(("jsonFormat",), [1], "json")
    add(("jsonPath",), [2], "json", a1=STR)
    add(("jsonPathString",), [2, 3], "json", a1=STR, a2=STR)
    add(("jsonPathLong",), [2, 3], "json", a1=STR, a2=INT)
    add(("jsonPathDouble",), [2, 3], "json", a1=STR, a2=NUM)
    add(("jsonPathArray",), [2], "json", a1=STR)
    add(("jsonExtractScalar",), [3, 4], "json", a1=STR, a2=STR, a3=ANY)
    add(("toJsonMapStr",), [1], "json")
    for name in ("equals", "notEquals", "greaterThan", "greaterThanOrEqual", "lessThan"):
        add((name,), [2], "comparison")
    add(("lessThanOrEqual",), [2], "comparison")
    add(("between",), [3], "comparison")
    add(("isNull",), [1], "comparison")
    add(("isNotNull",), [1], "comparison")
    add(("and",), range(2, MAX_LOGICAL_ARGS + 1), "logical")
    add(("or",), range(2, MAX_LOGICAL_ARGS + 1), "logical")
    add(("not",), [1], "logical")
    add(("stPoint",), [2, 3], "geo")  # ST_Point, ST_point: the same canonical name
    add(("toSphericalGeography",), [1], "geo")
    add(("toGeometry",), [1], "geo")
    add(("stAsText",), [1], "geo")
    return {canonical(name): spec for names, spec in specs for name in names}


FUNCTIONS: dict[str, FunctionSpec] = _specs()


def supported_function_names() -> list[str]:
    """Every supported name (aliases included), as Pinot spells them."""
    names = {name: None for name in (spec.name for spec in FUNCTIONS.values())}
    aliases = ["add", "sub", "mult", "div", "ceiling"]
    return [*names, *aliases]


def _literal_fits(value: object, kind: str) -> bool:
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUM:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == STR:
        return isinstance(value, str)
    return True


def _counts(arities: frozenset[int]) -> str:
    ordered = sorted(arities)
    if len(ordered) > 3 and ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"{ordered[0]} to {ordered[-1]}"
    return " or ".join(str(n) for n in ordered)


def check_expression(expr: Expr) -> None:
    """TransformExprError for the first call (depth first) the build cannot run."""
    if not isinstance(expr, Call):
        return
    spec = FUNCTIONS.get(expr.key)
    if spec is None:
        raise TransformExprError(
            f"function {expr.name} is not supported by the segment build", expr.name
        )
    if len(expr.args) not in spec.arities:
        counts = _counts(spec.arities)
        raise TransformExprError(
            f"{spec.name} takes {counts} argument(s), not {len(expr.args)}", expr.name
        )
    for position, arg in enumerate(expr.args):
        kind = spec.literals.get(position)
        if kind is not None and not (isinstance(arg, Literal) and _literal_fits(arg.value, kind)):
            raise TransformExprError(
                f"argument {position + 1} of {spec.name} must be {kind}", expr.name
            )
        check_expression(arg)


def parse_transform(text: str) -> Expr:
    """`parse_expression` then `check_expression`."""
    expr = parse_expression(text)
    check_expression(expr)
    return expr


def walk(expr: Expr) -> Iterator[Expr]:
    """The nodes of `expr`, depth first, the node itself first."""
    yield expr
    if isinstance(expr, Call):
        for arg in expr.args:
            yield from walk(arg)


def columns_of(expr: Expr) -> list[str]:
    """The input fields `expr` reads, in order, without repeats."""
    return list(dict.fromkeys(n.name for n in walk(expr) if isinstance(n, Column)))


def transform_config_problems(configs: object, columns: Iterable[str] | None = None) -> list[str]:
    """One sentence per `transformConfigs` entry the build cannot run (see the module docstring)."""
    if configs is None:
        return []
    where = "ingestionConfig.transformConfigs"
    if not isinstance(configs, list):
        return [f"{where} must be a list"]
    known = set(columns) if columns is not None else None
    problems: list[str] = []
    for index, entry in enumerate(configs, start=1):
        column = entry.get("columnName") if isinstance(entry, Mapping) else None
        text: Any = entry.get("transformFunction") if isinstance(entry, Mapping) else None
        if not isinstance(column, str) or not isinstance(text, str):
            problems.append(
                f"{where} entry #{index} needs string 'columnName' and 'transformFunction'"
            )
            continue
        if known is not None and column not in known:
            problems.append(f"{where}: column '{column}' is not a column of the schema")
            continue
        try:
            parse_transform(text)
        except TransformExprError as exc:
            culprit = f" (function {exc.function})" if exc.function else ""
            problems.append(
                f"{where}: column '{column}': transform function {text.strip()!r} cannot be "
                f"run{culprit}: {exc}"
            )
    return problems


# --- filters ------------------------------------------------------------------------------------

FILTER_WHERE = "ingestionConfig.filterConfig.filterFunction"


def parse_filter(text: str) -> Expr:
    """A `filterFunction`, parsed and checked; TransformExprError when the build cannot run it or
    its top-level call returns no boolean (a literal or a column is taken as it is)."""
    expr = parse_transform(text)
    if isinstance(expr, Call) and expr.key not in BOOLEAN_FUNCTIONS:
        spec = FUNCTIONS[expr.key]
        raise TransformExprError(
            f"{spec.name} does not return a boolean, so the filter would never drop a row (use "
            "a comparison such as equals, greaterThan, or and/or/not around one)",
            expr.name,
        )
    return expr


def filter_config_problems(config: object) -> list[str]:
    """The problems of an `ingestionConfig.filterConfig` (empty when absent or runnable), each
    naming `filterConfig` and the function."""
    if config is None:
        return []
    if not isinstance(config, Mapping):
        return ["ingestionConfig.filterConfig must be a JSON object"]
    text = config.get("filterFunction")
    if text is None:
        return []
    if not isinstance(text, str):
        return [f"{FILTER_WHERE} must be a string"]
    try:
        parse_filter(text)
    except TransformExprError as exc:
        culprit = f" (function {exc.function})" if exc.function else ""
        return [f"{FILTER_WHERE} {text.strip()!r} cannot be run{culprit}: {exc}"]
    return []


# --- complex types ------------------------------------------------------------------------------

COMPLEX_WHERE = "ingestionConfig.complexTypeConfig"
#: Pinot's `collectionNotUnnestedToJson` modes (default NON_PRIMITIVE).
COLLECTION_TO_JSON_MODES = ("NONE", "NON_PRIMITIVE", "ALL")


def complex_type_problems(config: object) -> list[str]:
    """The problems of an `ingestionConfig.complexTypeConfig` the build cannot honour: shapes,
    an unknown `collectionNotUnnestedToJson` mode, an empty name in `fieldsToUnnest` (honoured:
    one row per element, each at its message's offset), and `prefixesToRename`."""
    if config is None:
        return []
    if not isinstance(config, Mapping):
        return [f"{COMPLEX_WHERE} must be a JSON object"]
    problems: list[str] = []
    unnest = config.get("fieldsToUnnest")
    if unnest is not None and not (
        isinstance(unnest, list) and all(isinstance(f, str) and f for f in unnest)
    ):
        problems.append(f"{COMPLEX_WHERE}.fieldsToUnnest must be a list of field names")
    delimiter = config.get("delimiter")
    if delimiter is not None and (not isinstance(delimiter, str) or not delimiter):
        problems.append(f"{COMPLEX_WHERE}.delimiter must be a non-empty string")
    mode = config.get("collectionNotUnnestedToJson")
    if mode is not None and (not isinstance(mode, str) or mode not in COLLECTION_TO_JSON_MODES):
        problems.append(
            f"{COMPLEX_WHERE}.collectionNotUnnestedToJson must be one of "
            f"{', '.join(COLLECTION_TO_JSON_MODES)}, not {mode!r}"
        )
    if config.get("prefixesToRename"):
        problems.append(
            f"{COMPLEX_WHERE}.prefixesToRename is not supported by the segment build: name the "
            "schema columns by their flattened names ('parent<delimiter>child') instead"
        )
    return problems
