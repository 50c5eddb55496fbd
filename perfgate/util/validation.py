"""Reading files perfgate did not necessarily write: results.json, baselines, comparison.json, ceilings.json,
shard folders from other jobs. No torch.

Every such file is untrusted (docs/ci.md, "Untrusted files"): it is read with a size cap, must be UTF-8
JSON nested no deeper than a results document needs, and each field is checked for its type before any
code relies on it. Anything wrong is a ``SchemaError`` naming the file and the field (exit 2, one line),
never a traceback deep in the comparison or an exporter.

The fields are declared once, as pydantic models (``Document`` for files, ``Table`` for the
``[tool.perfgate]`` table) built from the value types below (``Name``, ``Count``, ``Number``...), each of
which carries the words its error uses; ``check`` validates data against a model and turns the first
problem into that one line. A record the model also holds as a dataclass (a case's spec, a process's
samples, a whole run, a baseline, a comparison...) is declared once, as the dataclass: its Document is
generated from it (``document``; ``Stored`` where the file holds a field otherwise) and read back into it
(``from_document``). The same models give the JSON Schemas published under docs/schemas/
(perfgate.commands.schemas).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    WrapValidator,
    create_model,
)
from pydantic import model_validator as model_validator
from pydantic_core import PydanticCustomError

# A results.json of a large suite is a few MB (raw samples of every process); 64 MiB leaves ample room
# and keeps a hostile file from filling memory. PERFGATE_MAX_FILE_MB raises it where needed.
DEFAULT_MAX_FILE_MB = 64
# results documents nest about 8 deep (cases -> profile -> top_ops -> entry); deeper is not ours
MAX_DEPTH = 64
# names (workload, size, toggle, case key, suite...): the history store's widest column (a case key)
MAX_NAME = 512


class SchemaError(ValueError):
    """A file that cannot be read: corrupt JSON, an unknown schema or a malformed entry."""


def max_file_bytes() -> int:
    """The size cap for any file perfgate reads: PERFGATE_MAX_FILE_MB (MiB), default 64."""
    raw = os.environ.get("PERFGATE_MAX_FILE_MB", "")
    try:
        mb = int(raw) if raw else DEFAULT_MAX_FILE_MB
    except ValueError:
        mb = DEFAULT_MAX_FILE_MB
    return max(mb, 1) * 1024 * 1024


class TooLarge(ValueError):
    """A file over the size cap (``mib``); raised by ``read_capped`` before it is read whole."""

    def __init__(self, mib: int) -> None:
        super().__init__(f"larger than {mib} MiB")
        self.mib = mib


def read_capped(p: Path) -> str:
    """The UTF-8 text of ``p``, read under the size cap of every file perfgate reads (``max_file_bytes``): a
    larger file is never read whole. Raises OSError (missing, unreadable), TooLarge or UnicodeDecodeError;
    each caller turns them into its own one-line error."""
    limit = max_file_bytes()
    with open(p, "rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise TooLarge(limit // (1024 * 1024))
    return raw.decode("utf-8")


def read_text_capped(p: Path, what: str, missing_hint: str = "") -> str:
    """The UTF-8 text of ``p``; SchemaError when missing, unreadable, over the size cap or not UTF-8."""
    try:
        return read_capped(p)
    except FileNotFoundError as exc:
        hint = f"; {missing_hint}" if missing_hint else ""
        raise SchemaError(f"{p}: cannot read {what} (no such file){hint}") from exc
    except OSError as exc:
        raise SchemaError(f"{p}: cannot read {what} ({exc.strerror or exc})") from exc
    except TooLarge as exc:
        raise SchemaError(f"{p}: {what} is {exc}; not a perfgate file (PERFGATE_MAX_FILE_MB raises the limit)") from exc
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{p}: {what} is not UTF-8 text (byte {exc.start}); not a perfgate file") from exc


# The widest number a float holds has 309 digits; a JSON number past it either overflows the first float()
# that meets it (OverflowError) or, past 4,300 digits, cannot even be read as an int (ValueError).
MAX_NUMBER_DIGITS = 308
# A cheap test of the whole text for a number that might be too large (a long run of digits, or a
# 3-digit exponent); only then is the text read again with a check on every number.
_MAYBE_HUGE = re.compile(rf"\d{{{MAX_NUMBER_DIGITS + 1},}}|[eE][+-]?\d{{3,}}")


class _HugeNumber(Exception):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


def _checked_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _HugeNumber(literal)
    return int(literal)


def _checked_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):  # a finite literal too large for a float (1e400); JSON has no literal for infinity
        raise _HugeNumber(literal)
    return value


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's dict; _DuplicateKey when a key comes twice. json.loads keeps the last silently, while a
    reviewer of a baseline in a pull request, and most tools, read the first: a second "samples_ns" further
    down would be what the gate judges, unseen."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _loads(text: str) -> Any:
    """json.loads, refusing (with _HugeNumber) a number with more than MAX_NUMBER_DIGITS digits or one that
    overflows a float, and (with _DuplicateKey) an object that holds a key twice."""
    if not _MAYBE_HUGE.search(text):
        return json.loads(text, object_pairs_hook=_unique_keys)
    return json.loads(text, parse_int=_checked_int, parse_float=_checked_float, object_pairs_hook=_unique_keys)


def parse_json(text: str, source: str, what: str) -> Any:
    """``text`` decoded as JSON, nested at most MAX_DEPTH deep, every number one a float can hold;
    SchemaError naming ``source`` otherwise. Every untrusted JSON file perfgate reads comes through here."""
    try:
        data = _loads(text)
    except _HugeNumber as exc:
        shown = exc.literal if len(exc.literal) <= 24 else f"{exc.literal[:12]}...{exc.literal[-6:]}"
        raise SchemaError(f"{source}: {what} holds a number too large to be a measurement ({shown}, "
                          f"{len(exc.literal)} characters); not a perfgate file") from None
    except _DuplicateKey as exc:
        raise SchemaError(f"{source}: {what} holds the key {describe(exc.key)} twice in one object (which one "
                          "counts differs between readers); not a perfgate file") from None
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{source}: {what} is not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    except RecursionError as exc:
        raise SchemaError(f"{source}: {what} is nested too deeply to be a perfgate file") from exc
    if depth(data) > MAX_DEPTH:
        raise SchemaError(f"{source}: {what} is nested more than {MAX_DEPTH} deep; not a perfgate file")
    if _ESCAPED_SURROGATE.search(text):  # JSON can spell a lone surrogate, which no UTF-8 output can hold
        data = _without_surrogates(data)
    return data


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def read_json_file(p: Path, what: str, missing_hint: str = "") -> Any:
    """The parsed JSON of ``p``, read under the size cap; SchemaError naming the file otherwise."""
    return parse_json(read_text_capped(p, what, missing_hint), str(p), what)


def depth(data: Any) -> int:
    """How deep ``data`` nests (a scalar is 0), without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, d = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in children)
    return deepest


def describe(value: Any) -> str:
    """A short, printable picture of a bad value for an error message."""
    text = ascii(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Fields:
    """Typed access to one JSON object of an untrusted document; errors name the source and field path."""

    def __init__(self, data: Any, source: str, where: str) -> None:
        self.source, self.where = source, where
        if not isinstance(data, dict):
            self.fail(where, "an object", data)
        self.data: dict[str, Any] = data

    def fail(self, where: str, expected: str, value: Any) -> None:
        raise SchemaError(f"{self.source}: {where or 'document'} must be {expected}, got {describe(value)}")

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, check: Callable[[Any, str], Any], default: Any = None, required: bool = False) -> Any:
        if key not in self.data or (self.data[key] is None and not required):
            if required:
                raise SchemaError(f"{self.source}: {self.path(key)} is missing")
            return default
        return check(self.data[key], self.path(key))

    # checks: (value, where) -> the value, or SchemaError

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            self.fail(where, "a string", value)
        return value

    def name(self, value: Any, where: str) -> str:
        """A non-empty string of printable text, at most MAX_NAME characters (a workload, size, toggle...)."""
        if not isinstance(value, str) or not value or len(value) > MAX_NAME or not value.isprintable():
            self.fail(where, f"a non-empty printable string of at most {MAX_NAME} characters", value)
        return value

    def integer(self, value: Any, where: str, low: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
            self.fail(where, "an integer" + (f" >= {low}" if low is not None else ""), value)
        return value

    def positive_int(self, value: Any, where: str) -> int:
        return self.integer(value, where, low=1)

    def number(self, value: Any, where: str) -> float:
        """An int or a finite float (not a bool)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(where, "a finite number", value)
        return value

    def number_or_nan(self, value: Any, where: str) -> float:
        """A number; NaN and infinities allowed (measured drift of a broken toggle can be NaN)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, "a number", value)
        return value

    def non_negative(self, value: Any, where: str) -> float:
        if self.number(value, where) < 0:
            self.fail(where, "a number >= 0", value)
        return value

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            self.fail(where, "true or false", value)
        return value

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, "an object", value)
        return value

    def array(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(where, "an array", value)
        return value

    def each(self, check: Callable[[Any, str], Any]) -> Callable[[Any, str], list[Any]]:
        """A check of an array whose every item passes ``check``."""

        def run(value: Any, where: str) -> list[Any]:
            return [check(item, f"{where}[{i}]") for i, item in enumerate(self.array(value, where))]

        return run

    def values(self, check: Callable[[Any, str], Any]) -> Callable[[Any, str], dict[str, Any]]:
        """A check of an object whose every value passes ``check``."""

        def run(value: Any, where: str) -> dict[str, Any]:
            return {k: check(v, f"{where}.{k}") for k, v in self.obj(value, where).items()}

        return run

    def one_of(self, choices: tuple[str, ...]) -> Callable[[Any, str], str]:
        def run(value: Any, where: str) -> str:
            if value not in choices:
                self.fail(where, f"one of {', '.join(choices)}", value)
            return value

        return run


# ---------------------------------------------------------------- the declarative schema's vocabulary
#
# Each value type names, in the words of an error line, what would be valid ("an integer >= 1"); the
# wrapper below replaces pydantic's own message with those words, so every reader says the same thing
# about the same kind of field. Strict throughout: true is not a number and "3" is not an integer.


def expected(words: str) -> WrapValidator:
    """Validation metadata: any failure of the value it annotates reads "must be <words>"."""

    def wrap(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except (ValidationError, ValueError):
            raise PydanticCustomError("expected", words) from None

    return WrapValidator(wrap)


def satisfying(check: Callable[[Any], bool]) -> AfterValidator:
    """Validation metadata: the value must pass ``check`` (its words come from ``expected``)."""

    def run(value: Any) -> Any:
        if not check(value):
            raise ValueError("out of range")
        return value

    return AfterValidator(run)


def _number_schema(**bounds: float) -> WithJsonSchema:
    return WithJsonSchema({"type": "number", **bounds})


_NUMBER = int | float  # an int stays an int (samples_ns), a bool is neither (strict)
Text = Annotated[str, expected("a string")]
Name = Annotated[str, WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_NAME}),
                 satisfying(lambda v: 0 < len(v) <= MAX_NAME and v.isprintable()),
                 expected(f"a non-empty printable string of at most {MAX_NAME} characters")]
Integer = Annotated[int, expected("an integer")]
Index = Annotated[int, satisfying(lambda v: v >= 0), WithJsonSchema({"type": "integer", "minimum": 0}),
                  expected("an integer >= 0")]
Count = Annotated[int, satisfying(lambda v: v >= 1), WithJsonSchema({"type": "integer", "minimum": 1}),
                  expected("an integer >= 1")]
# a measured value: NaN and infinities allowed (the drift of a broken toggle can be NaN)
Measured = Annotated[_NUMBER, _number_schema(), expected("a number")]
Number = Annotated[_NUMBER, satisfying(math.isfinite), _number_schema(), expected("a finite number")]
NonNegative = Annotated[_NUMBER, satisfying(lambda v: math.isfinite(v) and v >= 0), _number_schema(minimum=0),
                        expected("a finite number >= 0")]
Positive = Annotated[_NUMBER, satisfying(lambda v: math.isfinite(v) and v > 0), _number_schema(exclusiveMinimum=0),
                     expected("a finite number > 0")]


def one_of(choices: tuple[str, ...]) -> Any:
    """The type of a field that is one of ``choices``."""
    return Annotated[Literal[choices], expected("one of " + ", ".join(choices))]


def int_range(low: int, high: int, words: str | None = None) -> Any:
    """The type of an integer from ``low`` to ``high``."""
    return Annotated[int, satisfying(lambda v: low <= v <= high),
                     WithJsonSchema({"type": "integer", "minimum": low, "maximum": high}),
                     expected(words or f"an integer from {low} to {high}")]


class Document(BaseModel):
    """A JSON object of a file perfgate reads: typed fields; keys it does not know are ignored (written
    for readers of the file, such as a case's "derived" statistics, or by a newer perfgate)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Table(BaseModel):
    """A TOML table of ``[tool.perfgate]``: typed fields, and an unknown key is an error listing the valid ones."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(cls.model_fields))
            if unknown:
                raise PydanticCustomError("unknown_keys", "unknown key(s) {unknown}; valid: {valid}",
                                          {"unknown": ", ".join(map(str, unknown)), "valid": ", ".join(cls.model_fields)})
        return data


_THE_RECORDS = object()  # Stored.default: the file's default is the dataclass's
VERSION = "schema_version"  # the field of a document ``document(..., version=...)`` declares, under the key "schema"


@dataclasses.dataclass(frozen=True)
class Stored:
    """How a record's field is held in its file where that differs from its type in the dataclass (in
    ``Annotated[type, Stored(...)]``): ``kind``, the file's type; ``default``, the file's default where it
    is not the dataclass's (``...``: required); ``key``, the file's key where it is not the field's name;
    ``read``, what makes the dataclass's value of the file's validated one.

    Without a ``kind`` the file holds no field of its own for it: it is read (through ``read``) from the
    file's field ``key``, which another field declares (or the schema version, VERSION); or, with no ``key``
    either (NOT_STORED), it is not in the file at all and reads back as the dataclass's default."""

    kind: Any = None
    default: Any = _THE_RECORDS
    read: Callable[[Any], Any] | None = None
    key: str | None = None

    @property
    def declared(self) -> bool:
        """Whether the file holds a field of its own for it."""
        return self.kind is not None


NOT_STORED = Stored()  # a record's field its file does not hold (where it was read from, a run kept beside it)

R = TypeVar("R")
_RECORDS: dict[type[BaseModel], type] = {}  # each generated Document -> the dataclass it declares
_STORED: dict[type, dict[str, Stored | None]] = {}


def _stored(record: type) -> dict[str, Stored | None]:
    """Each field of the dataclass ``record`` by name, with its Stored declaration (None: as typed)."""
    if record not in _STORED:
        hints = typing.get_type_hints(record, include_extras=True)
        _STORED[record] = {f.name: next((m for m in getattr(hints[f.name], "__metadata__", ()) if isinstance(m, Stored)),
                                        None) for f in dataclasses.fields(record)}
    return _STORED[record]


def document(record: type, name: str, *, version: str | None = None, doc: str | None = None,
             **written: tuple[Any, Any]) -> type[Document]:
    """The Document a file holds the dataclass ``record`` as, named ``name``: first, where the file names
    its schema ``version``, that field (VERSION, under the key "schema": an older version is upgraded
    before); then one field per dataclass field the file holds, in its order, with its type (a value type
    above) or its ``Stored`` type and key, and its default; ``written``: the fields the file holds for its
    readers and no reader reads back, as (type, default). Its JSON Schema says ``doc``, else what
    ``record``'s docstring says."""
    hints = typing.get_type_hints(record, include_extras=True)
    fields: dict[str, Any] = {}
    if version is not None:
        fields[VERSION] = (Literal[version], Field(alias="schema"))
    for f, stored in zip(dataclasses.fields(record), _stored(record).values(), strict=True):
        if stored is not None and not stored.declared:
            continue
        default: Any = ...  # required
        if stored is not None and stored.default is not _THE_RECORDS:
            default = stored.default
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        key = stored.key if stored is not None and stored.key else f.name
        fields[key] = (hints[f.name] if stored is None else stored.kind, default)
    fields.update(written)
    model = create_model(name, __base__=Document, __doc__=doc or record.__doc__, __module__=record.__module__,
                         **fields)
    _RECORDS[model] = record
    return model


def _read(value: Any) -> Any:
    """``value`` with every generated Document in it (in a list too) read back into its dataclass."""
    if isinstance(value, BaseModel) and type(value) in _RECORDS:
        return from_document(_RECORDS[type(value)], value)
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        return [_read(v) for v in value]
    return value


def from_document(record: type[R], doc: BaseModel) -> R:
    """The dataclass ``record`` of ``doc``, a Document ``document`` generated from it and validated: each
    field's value as validated; a field with a ``Stored`` (a nested record's is its document) read back
    into the record's shape: its records into theirs, then through ``Stored.read``; a field the file does
    not hold (NOT_STORED) left to its default."""
    values = {}
    for name, stored in _stored(record).items():
        if stored is None:
            values[name] = getattr(doc, name)
            continue
        if not stored.declared and stored.key is None:
            continue
        value = _read(getattr(doc, stored.key or name))
        values[name] = stored.read(value) if stored.read is not None else value
    return record(**values)


def field_error(field: str, words: str) -> PydanticCustomError:
    """The error a model validator raises when ``field`` must be ``words`` given the other fields."""
    return PydanticCustomError("field", "{words}", {"field": field, "words": words})


M = TypeVar("M", bound=BaseModel)

# pydantic's own error types, for values no type above annotates: the same words as the types above
_WORDS = {"dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
          "list_type": "an array", "tuple_type": "an array", "string_type": "a string", "int_type": "an integer",
          "float_type": "a number", "bool_type": "true or false", "literal_error": "one of {expected}"}


def set_fields(model: BaseModel) -> dict[str, Any]:
    """The fields the validated data set, by name, as validated (nested models stay models)."""
    return {k: getattr(model, k) for k in model.model_fields_set}


def path_text(loc: tuple[Any, ...] | list[Any], where: str = "") -> str:
    """A field's path as error lines write it: ``cases[0].processes[1].loops``."""
    out = where
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def check(model: type[M], data: Any, source: str, where: str = "", table: str = "",
          error: type[ValueError] = SchemaError, nouns: dict[str, str] | None = None) -> M:
    """``data`` validated as ``model``; else ``error`` with one line naming ``source``, the field, what would
    be valid and the value found. ``where`` prefixes field paths; ``table`` names a TOML table
    (``tool.perfgate``) whose unknown keys are reported as ``[tool.perfgate.suites.x]``; ``nouns`` rewords
    pydantic's error types (TOML says "a table" where JSON says "an object")."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
    loc, kind, ctx = tuple(problem["loc"]), problem["type"], problem.get("ctx") or {}
    value = problem.get("input")
    if kind == "field":  # a model validator's complaint about one field: name it, show its value
        loc = (*loc, ctx["field"])
        value = value.get(ctx["field"]) if isinstance(value, dict) else getattr(value, ctx["field"], value)
    field = path_text(loc, where)
    if kind == "unknown_keys":
        inside = f"[{table}{'.' + field if field else ''}]" if table else (field or "the document")
        raise error(f"{source}: unknown key(s) {ctx['unknown']} in {inside}; valid: {ctx['valid']}")
    if kind == "missing":
        raise error(f"{source}: {field} is missing")
    if kind in ("expected", "field"):
        words = problem["msg"]
    elif kind in (vocabulary := {**_WORDS, **(nouns or {})}):
        words = vocabulary[kind].format(expected=str(ctx.get("expected", "")).replace("'", ""))
    else:  # a rule no type above words; pydantic's own sentence, which names it
        words = f"valid ({problem['msg']})"
    raise error(f"{source}: {field or 'document'} must be {words}, got {describe(value)}")
