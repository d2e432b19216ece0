"""What a traced program holds: the equations of a jaxpr, counted at its top level, with the jaxprs
nested in it (scan bodies, conds, nested jits), and per scan body; and the carry of its first scan.
explain.py reports them (``bench explain``); the tests read them too."""

from __future__ import annotations

import collections
from typing import Iterator


def sub_jaxprs(eqn) -> Iterator:
    """The jaxprs inside one equation's parameters (scan bodies, nested jits, ...)."""
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if hasattr(item, "eqns"):
                yield item
            elif hasattr(item, "jaxpr") and hasattr(item.jaxpr, "eqns"):
                yield item.jaxpr


def nested_eqns(jaxpr) -> Iterator:
    """Every equation of ``jaxpr`` and of the jaxprs nested in it."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in sub_jaxprs(eqn):
            yield from nested_eqns(sub)


def jaxpr_stats(closed) -> dict:
    """Equations of a (closed) jaxpr: at the top level, counting nested jaxprs,
    and of every scan body (nested ones counted: the model's step sits inside
    a cond), in the order the scans appear; and the first scan's loop state
    (its carry's and its xs' types, no values)."""
    jaxpr = closed.jaxpr
    nested = list(nested_eqns(jaxpr))
    scans = [eqn for eqn in nested if eqn.primitive.name == "scan"]
    stats = {
        "eqns": len(jaxpr.eqns),
        "eqns_total": len(nested),
        "primitives": dict(collections.Counter(e.primitive.name for e in jaxpr.eqns).most_common(6)),
        "scans": len(scans),
        "scan_body_eqns": [sum(1 for _ in nested_eqns(eqn.params["jaxpr"].jaxpr)) for eqn in scans],
        "scan_lengths": [int(eqn.params["length"]) for eqn in scans],
    }
    if scans:
        first = scans[0]
        body = first.params["jaxpr"].jaxpr
        n_consts, n_carry = first.params["num_consts"], first.params["num_carry"]
        stats["loop_state"] = {
            "carry": [v.aval.str_short() for v in body.invars[n_consts:n_consts + n_carry]],
            "xs": [v.aval.str_short() for v in body.invars[n_consts + n_carry:]],
            "consts": n_consts,
        }
    return stats
