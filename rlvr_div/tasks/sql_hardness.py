"""Spider's hardness of a SQL query (``easy`` / ``medium`` / ``hard`` / ``extra``), as the official Spider evaluation
(``evaluation.py``, ``Evaluator.eval_hardness``) assigns it, from three counts over the top-level query:

- *component1*: 1 for each of a WHERE, a GROUP BY, an ORDER BY and a LIMIT clause that is there; one per table past
  the first in FROM (joins; a subquery in FROM is a table); one per OR and one per LIKE (``NOT LIKE`` too) among the
  conditions of the JOIN … ON clauses, WHERE and HAVING;
- *component2*: one per subquery that is a value of one of those conditions (``x IN (SELECT …)``, ``x > (SELECT
  …)``), plus one for an INTERSECT, UNION or EXCEPT (the first; the rest belong to its right-hand query);
- *others*: one for each of more than one aggregation, more than one SELECT column, more than one WHERE condition,
  more than one GROUP BY column.

Then ``easy`` if comp1 <= 1 and others == 0 and comp2 == 0; ``medium`` if (others <= 2 and comp1 <= 1 and comp2 ==
0) or (comp1 <= 2 and others < 2 and comp2 == 0); ``hard`` if (others > 2 and comp1 <= 2 and comp2 == 0) or (2 <
comp1 <= 3 and others <= 2 and comp2 == 0) or (comp1 <= 1 and others == 0 and comp2 <= 1); else ``extra``.

Subqueries, and the right-hand query of a set operation, add nothing but the one count above. The official counting
has quirks that decide some levels, and they are kept here: the aggregations counted are those that head a SELECT
column, a GROUP BY column or an ORDER BY term (``ORDER BY count(*)``), plus one per *negated* WHERE or HAVING
condition (``NOT IN``, ``NOT LIKE``) and one per AND/OR between HAVING conditions (the official code asks each
condition, and each connective, whether it aggregates by reading its first field, which holds the negation flag and
the connective's first letter); and a condition whose right-hand side is a column (``T1.a = T2.b``) swallows what
follows it up to the next AND, so an OR after it is not counted, nor the conditions it joins.

The official script parses the query against its database schema; this module reads the token stream only (no
schema), with its own small scanner: on the 1,034 questions of Spider dev it gives the official levels (see
``tests/test_spider_hardness.py``). Text that is not a SELECT query raises ValueError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LEVELS = ("easy", "medium", "hard", "extra")
AGGREGATES = frozenset({"max", "min", "count", "sum", "avg"})
SET_OPERATIONS = frozenset({"intersect", "union", "except"})
# what ends a clause: the next clause, a set operation, the end of a subquery or of the statement
_CLAUSE_ENDS = frozenset({"select", "from", "where", "group", "having", "order", "limit", ")", ";"}) | SET_OPERATIONS
_JOINS = frozenset({"join", "on", "using", "natural", "left", "right", "full", "inner", "outer", "cross"})
_CONDITION_ENDS = _CLAUSE_ENDS | _JOINS
_OPERATORS = frozenset({"=", "==", ">", "<", ">=", "<=", "!=", "<>", "in", "like", "glob", "is", "exists", "between"})
_TOKEN = re.compile(
    r"""(?P<string>'(?:[^']|'')*'|"(?:[^"]|"")*")
      |(?P<name>`[^`]*`|\[[^\]]*\]|[A-Za-z_][\w$]*(?:\s*\.\s*(?:[A-Za-z_][\w$]*|`[^`]*`|\*))*)
      |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
      |(?P<symbol><>|!=|>=|<=|==|\|\||[-+*/%=<>(),;.])
      |(?P<space>\s+)
      |(?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    kind: str  # string, name, number, symbol, other
    text: str  # lower case, except strings


def tokens(sql: str) -> list[Token]:
    """The tokens of ``sql`` (whitespace dropped; names and symbols in lower case; a dotted name is one token)."""
    out = []
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup or "other"
        if kind != "space":
            text = m.group()
            out.append(Token(kind, text if kind == "string" else re.sub(r"\s+", "", text).lower()))
    return out


@dataclass
class Conditions:
    """The conditions of one clause (or of all JOIN … ON clauses together): per condition whether it is negated,
    its operator and how many subqueries are its values; and the connectives (``and`` / ``or``) between them."""

    negated: list[bool] = field(default_factory=list)
    operators: list[str | None] = field(default_factory=list)
    subqueries: list[int] = field(default_factory=list)
    connectives: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.operators)

    def add(self, negated: bool, operator: str | None, subqueries: int) -> None:
        self.negated.append(negated)
        self.operators.append(operator)
        self.subqueries.append(subqueries)

    def extend(self, other: Conditions) -> None:
        """``other``'s conditions after these, joined by ``and`` (several ON clauses, as the official parser)."""
        if len(self) and len(other):
            self.connectives.append("and")
        self.negated += other.negated
        self.operators += other.operators
        self.subqueries += other.subqueries
        self.connectives += other.connectives


@dataclass
class Query:
    """What the hardness counts read from one SELECT (its subqueries are not looked into)."""

    select_aggregates: list[bool] = field(default_factory=list)  # per SELECT column: headed by an aggregation
    tables: int = 0  # tables and subqueries in FROM
    on: Conditions = field(default_factory=Conditions)
    where: Conditions = field(default_factory=Conditions)
    group_aggregates: list[bool] = field(default_factory=list)
    having: Conditions = field(default_factory=Conditions)
    order_aggregates: int = 0  # aggregations in the ORDER BY terms
    order_terms: int = 0
    limit: bool = False
    set_operation: bool = False

    def component1(self) -> int:
        conditions = (self.on, self.where, self.having)
        return (
            sum(map(bool, (len(self.where), self.group_aggregates, self.order_terms, self.limit)))
            + max(self.tables - 1, 0)
            + sum(c.connectives.count("or") for c in conditions)
            + sum(c.operators.count("like") for c in conditions)
        )

    def component2(self) -> int:
        return sum(sum(c.subqueries) for c in (self.on, self.where, self.having)) + int(self.set_operation)

    def others(self) -> int:
        aggregates = (
            sum(self.select_aggregates)
            + sum(self.where.negated)
            + sum(self.group_aggregates)
            + self.order_aggregates
            + len(self.having.connectives)
            + sum(self.having.negated)
        )
        several = (aggregates, len(self.select_aggregates), len(self.where), len(self.group_aggregates))
        return sum(n > 1 for n in several)


class _Scanner:
    """Reads :class:`Query` from the token list, leniently: what it does not understand it steps over."""

    def __init__(self, toks: list[Token]) -> None:
        self.toks = toks
        self.pos = 0

    def peek(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.toks[i].text if i < len(self.toks) else ""

    def kind(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.toks[i].kind if i < len(self.toks) else ""

    def done(self) -> bool:
        return self.pos >= len(self.toks)

    def skip(self, text: str) -> bool:
        if self.peek() == text:
            self.pos += 1
            return True
        return False

    def subquery(self) -> None:
        """At ``( SELECT``: read the subquery through its closing parenthesis."""
        self.pos += 1
        self.query()
        self.skip(")")

    def group(self) -> None:
        """At ``(``: step over everything up to the matching ``)``."""
        depth = 0
        while not self.done():
            t = self.peek()
            self.pos += 1
            depth += (t == "(") - (t == ")")
            if depth == 0:
                return

    def query(self) -> Query:
        """A SELECT, or ``( SELECT … )``, then an optional set operation with its right-hand query."""
        if self.peek() == "(" and self.peek(1) == "select":
            self.pos += 1
            q = self.query()
            self.skip(")")
        else:
            q = self.select()
        while self.skip(";"):
            pass
        if self.peek() in SET_OPERATIONS:
            self.pos += 1
            self.skip("all")
            self.query()
            q.set_operation = True
        return q

    def select(self) -> Query:
        q = Query()
        if not self.skip("select"):
            raise ValueError(f"not a SELECT query at token {self.pos}: {self.peek()!r}")
        while self.peek() in ("distinct", "all"):
            self.pos += 1
        q.select_aggregates = [item[0] in AGGREGATES for item in self.items() if item]
        while True:
            word = self.peek()
            if word == "from":
                self.pos += 1
                self.tables(q)
            elif word == "where":
                self.pos += 1
                q.where = self.conditions()
            elif word == "group" and self.peek(1) == "by":
                self.pos += 2
                q.group_aggregates = [item[0] in AGGREGATES for item in self.items() if item]
            elif word == "having":
                self.pos += 1
                q.having = self.conditions()
            elif word == "order" and self.peek(1) == "by":
                self.pos += 2
                terms = [item for item in self.items() if item]
                q.order_terms = len(terms)
                q.order_aggregates = sum(
                    t in AGGREGATES and nxt == "(" for item in terms for t, nxt in zip(item, item[1:])
                )
            elif word == "limit":
                self.pos += 1
                q.limit = True
                while not self.done() and self.peek() not in _CLAUSE_ENDS:
                    self.pos += 1
            else:
                return q

    def items(self) -> list[list[str]]:
        """The comma-separated items of a clause, each as its top-level tokens (a parenthesised group as ``(``
        ``)``), up to the clause's end."""
        items: list[list[str]] = [[]]
        while not self.done() and self.peek() not in _CLAUSE_ENDS:
            t = self.peek()
            if t == ",":
                items.append([])
                self.pos += 1
            elif t == "(":
                self.group()
                items[-1] += ["(", ")"]
            else:
                items[-1].append(t)
                self.pos += 1
        return items

    def tables(self, q: Query) -> None:
        """The FROM clause: its tables (a subquery counts as one) and the conditions of its ON clauses."""
        while not self.done():
            t = self.peek()
            if t in _CLAUSE_ENDS:
                return
            if t == "on":
                self.pos += 1
                q.on.extend(self.conditions())
            elif t == "using" or t == "," or t in _JOINS:
                self.pos += 1
                if t == "using" and self.peek() == "(":
                    self.group()
            elif t == "(" or self.kind() == "name":
                q.tables += 1
                if t != "(":
                    self.pos += 1
                elif self.peek(1) == "select":
                    self.subquery()
                else:
                    self.group()
                self.skip("as")
                if self.kind() == "name" and self.peek() not in _CONDITION_ENDS:
                    self.pos += 1  # the alias
            else:
                self.pos += 1

    def conditions(self) -> Conditions:
        """Conditions up to the end of their clause. Parentheses that are not a subquery are read through (the
        conditions inside them count as the clause's)."""
        out = Conditions()
        negated, operator, subqueries, started = False, None, 0, False
        depth, in_between = 0, False
        while not self.done():
            t = self.peek()
            if depth == 0 and t in _CONDITION_ENDS:
                break
            if t == "(" and self.peek(1) == "select":
                self.subquery()
                subqueries += 1
                started = True
                continue
            self.pos += 1
            if t == "(":
                depth += 1
            elif t == ")":
                depth -= 1
            elif t == "and" and in_between:
                in_between = False
            elif t in ("and", "or"):
                out.add(negated, operator, subqueries)
                out.connectives.append(t)
                negated, operator, subqueries, started = False, None, 0, False
                continue
            elif t == "not" and (self.pos < 2 or self.toks[self.pos - 2].text != "is"):
                negated = True
            elif t in _OPERATORS and operator is None:
                operator = t
                in_between = t == "between"
                if not in_between and self.kind() == "name" and self.peek(1) != "(":
                    self._swallow_column_value()
            started = True
        if started:
            out.add(negated, operator, subqueries)
        return out

    def _swallow_column_value(self) -> None:
        """The official parser reads a column on the right of a condition as everything up to the next ``,``,
        ``)``, AND or clause: step over it likewise."""
        depth = 0
        while not self.done():
            t = self.peek()
            if depth == 0 and (t in (",", "and") or t in _CONDITION_ENDS):
                return
            depth += (t == "(") - (t == ")")
            self.pos += 1


def spider_counts(sql: str) -> tuple[int, int, int]:
    """(component1, component2, others) of ``sql`` (see the module docstring); ValueError if it is not a SELECT."""
    toks = tokens(sql)
    if not toks:
        raise ValueError("empty query")
    q = _Scanner(toks).query()
    return q.component1(), q.component2(), q.others()


def hardness_level(component1: int, component2: int, others: int) -> str:
    """Spider's rules from the three counts (module docstring)."""
    c1, c2, n = component1, component2, others
    if c1 <= 1 and n == 0 and c2 == 0:
        return "easy"
    if (n <= 2 and c1 <= 1 and c2 == 0) or (c1 <= 2 and n < 2 and c2 == 0):
        return "medium"
    if (n > 2 and c1 <= 2 and c2 == 0) or (2 < c1 <= 3 and n <= 2 and c2 == 0) or (c1 <= 1 and n == 0 and c2 <= 1):
        return "hard"
    return "extra"


def spider_hardness(sql: str) -> str:
    """The Spider hardness level of ``sql``: ``easy``, ``medium``, ``hard`` or ``extra`` (:data:`LEVELS`), by the
    official counts and rules (module docstring); ValueError if ``sql`` is not a SELECT query."""
    return hardness_level(*spider_counts(sql))
