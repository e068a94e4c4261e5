"""Small AST helpers shared by the rule families (stdlib only)."""

from __future__ import annotations

import ast


def dotted(node: ast.AST) -> str:
    """Dotted text of a Name/Attribute/Call chain: ``self.codec.decode``.

    Parameters
    ----------
    node : ast.AST
        Usually a call's ``func``.

    Returns
    -------
    str
        A call inside the chain shows as ``()``: ``self.get_codec().decode``;
        anything else (subscripts, literals) shows as ``?``: ``?.decode``.
    """
    parts = []
    while True:
        cls = node.__class__
        if cls is ast.Attribute:
            parts.append(node.attr)
            node = node.value
        elif cls is ast.Name:
            parts.append(node.id)
            break
        elif cls is ast.Call:
            parts.append("()")
            node = node.func
        else:
            parts.append("?")
            break
    parts.reverse()
    return ".".join(parts).replace(".()", "()")


def is_self_attr(node: ast.AST) -> str | None:
    """``attr`` when ``node`` is ``self.attr``, else ``None``.

    Parameters
    ----------
    node : ast.AST

    Returns
    -------
    str or None
    """
    if node.__class__ is ast.Attribute and node.value.__class__ is ast.Name and node.value.id == "self":
        return node.attr
    return None


def const_str(node: ast.AST | None) -> str | None:
    """The value of a string constant node, else ``None``.

    Parameters
    ----------
    node : ast.AST or None

    Returns
    -------
    str or None
    """
    if node is not None and node.__class__ is ast.Constant and isinstance(node.value, str):
        return node.value
    return None


def keyword(call: ast.Call, name: str) -> ast.AST | None:
    """The value node of keyword ``name`` in ``call``, else ``None``.

    Parameters
    ----------
    call : ast.Call
    name : str
        Keyword argument name (``"generator"``, ``"persistent"``...); ``**kwargs`` never
        matches.

    Returns
    -------
    ast.AST or None
    """
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def is_false(node: ast.AST | None) -> bool:
    """True for the constant ``False`` (or ``0``; not ``""``).

    Parameters
    ----------
    node : ast.AST or None

    Returns
    -------
    bool
    """
    return node is not None and node.__class__ is ast.Constant and node.value in (False, 0) \
        and not isinstance(node.value, str)


def is_minus_one(node: ast.AST) -> bool:
    """True for ``-1`` written as a constant or a unary minus (``True`` / ``False`` never).

    Parameters
    ----------
    node : ast.AST

    Returns
    -------
    bool
    """
    if node.__class__ is ast.Constant:
        return node.value == -1 and not isinstance(node.value, bool)
    return (node.__class__ is ast.UnaryOp and isinstance(node.op, ast.USub)
            and node.operand.__class__ is ast.Constant and node.operand.value == 1)


def names_in(node: ast.AST) -> set[str]:
    """Identifiers, attribute names and string constants inside a (small) expression.

    Parameters
    ----------
    node : ast.AST
        Walked entirely with ``ast.walk``.

    Returns
    -------
    set of str
    """
    out: set[str] = set()
    for sub in ast.walk(node):
        cls = sub.__class__
        if cls is ast.Name:
            out.add(sub.id)
        elif cls is ast.Attribute:
            out.add(sub.attr)
        elif cls is ast.Constant and isinstance(sub.value, str):
            out.add(sub.value)
    return out


def node_word(sub: ast.AST) -> str | None:
    """The code word one node contributes to :func:`code_words` (``None`` for most nodes)."""
    cls = sub.__class__
    if cls is ast.Name:
        return sub.id
    if cls is ast.Attribute:
        return sub.attr
    if cls is ast.Constant:
        return sub.value if isinstance(sub.value, str) and sub.value.isidentifier() else None
    if cls in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
        return sub.name
    if cls is ast.arg:
        return sub.arg
    if cls is ast.keyword:
        return sub.arg
    if cls is ast.alias:
        return sub.name.replace(".", " ") + (" " + sub.asname if sub.asname else "")
    if cls is ast.ImportFrom:
        return sub.module.replace(".", " ") if sub.module else None
    return None


def is_prose(sub: ast.AST) -> bool:
    """A bare string statement (a docstring): prose, not code."""
    return sub.__class__ is ast.Expr and sub.value.__class__ is ast.Constant


def code_words(node: ast.AST) -> str:
    """The words the code of ``node`` is made of, lower-cased and space-joined: identifiers,
    attribute / argument / keyword / definition / import names, and string constants that are
    identifiers themselves (``info["audio_lengths"]``, ``getattr(c, "rope_parameters")``).

    Rules test these instead of the source text, so a comment, a docstring or a message string
    never decides a finding (``# see rope_parameters`` reads nothing).

    Parameters
    ----------
    node : ast.AST
        A module, class, function or expression; walked entirely.

    Returns
    -------
    str
        ``" ".join`` of the words (duplicates kept; callers test substrings).
    """
    out: list[str] = []
    stack = [node]
    while stack:
        sub = stack.pop()
        if is_prose(sub):
            continue
        word = node_word(sub)
        if word:
            out.append(word)
        stack.extend(ast.iter_child_nodes(sub))
    return " ".join(out).lower()


def code_words_by_scope(tree: ast.AST) -> dict[int, str]:
    """:func:`code_words` of ``tree`` and of every function and class in it, in one walk.

    Parameters
    ----------
    tree : ast.AST
        Usually the module.

    Returns
    -------
    dict of int to str
        ``id(node)`` -> its code words, for ``tree`` and each ``FunctionDef`` /
        ``AsyncFunctionDef`` / ``ClassDef`` below it (a nested scope's words count for
        every enclosing one, as :func:`code_words` of the outer node would give).
    """
    words: dict[int, list[str]] = {id(tree): []}
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    stack: list[tuple[ast.AST, tuple[list[str], ...]]] = [(tree, (words[id(tree)],))]
    while stack:
        sub, owners = stack.pop()
        if is_prose(sub):
            continue
        if sub.__class__ in scopes and sub is not tree:
            own: list[str] = []
            words[id(sub)] = own
            owners = (*owners, own)
        word = node_word(sub)
        if word:
            for o in owners:
                o.append(word)
        for child in ast.iter_child_nodes(sub):
            stack.append((child, owners))
    return {k: " ".join(v).lower() for k, v in words.items()}
