"""The graph behind one batch's loss and gradients, recorded or traced, read from docs/figures/explain.json."""

from __future__ import annotations

from bench.check import GUIDES
from bench.figures import style
from bench.render.sources import QuoteError, Results

OTHER_TREES = "other_trees"  # the same words in other tree shapes: an implementation's graph size for each
MAIN_BLOCK = "fig-main"  # the guide's first figure: its batch is also drawn as the same words in other trees


def _traced(value: dict) -> dict | None:
    """The size of a traced loss-and-gradients program: its total and, of it, the loop bodies (each once)."""
    program = value.get("loss_and_grads")
    if isinstance(program, dict) and "eqns_total" in program:  # a jaxpr: eqns_total counts the nested bodies
        bodies = list(program.get("scan_body_eqns") or [])
        return {"loop": "scan", "size": program["eqns_total"], "outside": program["eqns_total"] - sum(bodies),
                "bodies": bodies, "unit": "equations"}
    if isinstance(program, dict) and "ops" in program:  # a GraphDef: the loops live in its function library
        bodies, conds = list(program.get("while_body_ops") or []), list(program.get("while_cond_ops") or [])
        return {"loop": "while", "size": program["ops"] + sum(bodies) + sum(conds), "outside": program["ops"],
                "bodies": bodies, "conditions": conds, "unit": "ops"}
    return None


def read_block(block: dict) -> dict | None:
    """The graph sizes an explain block reports, or None if it reports none (a bad-input block, say)."""
    r, batch = block["result"], block["result"].get("batch") or {}
    if "num_steps" not in batch or "model" not in r:
        return None
    recorded, traced, other, units = {}, {}, {}, {}
    for name, value in r.items():
        graph = value.get("graph") if isinstance(value, dict) else None
        if isinstance(graph, dict) and "recorded" in graph:
            recorded[name], other[name] = graph["recorded"], dict(value.get(OTHER_TREES) or {})
            units[name] = "autograd nodes" if "autograd_nodes" in value else "nodes"
        elif isinstance(graph, dict) and "body" in graph and _traced(value) is not None:
            traced[name] = _traced(value)
            units[name] = traced[name]["unit"]
    m = r["model"]
    return None if not recorded and not traced else {
        "id": block["id"], "command": block["command"], "source": block["source"],
        "model": f"E={m['embed_dim']} H={m['hidden_dim']} D={m['tracker_dim']} M={m['mlp_dim']} L={m['mlp_layers']}",
        "pairs": batch["pairs"], "sentences": batch["sentences"], "what": batch["source"], "trees": batch["trees"],
        "N": batch["num_tokens"], "T": batch["num_steps"], "recorded": recorded, "other_trees": other,
        "traced": traced, "units": units}


def describe(batches: list[dict]) -> str:
    """A point's label in words: the batches that landed on it, by sentence count and trees."""
    counts, kinds = sorted({b["sentences"] for b in batches}), list(dict.fromkeys(b["trees"] for b in batches))
    if len(kinds) == 1 or len(counts) == 1:
        return f"{' or '.join(map(str, counts))} sentence{'' if counts == [1] else 's'}, {' or '.join(kinds)} trees"
    return "; ".join(describe([b]) for b in batches)


def graph_size(results: Results, plt):
    """The graph behind one batch against the loop steps T and the trees: recorded every batch, or traced once."""
    guides = {guide: k for k, guide in enumerate(GUIDES)}  # the blocks in the guides' order
    blocks = sorted(results.explained().values(), key=lambda b: (guides.get(b["guide"], len(guides)), b["id"]))
    read = [r for r in map(read_block, blocks) if r is not None]
    if not read:
        raise QuoteError("no explain block of the documents reports graph sizes")
    main = next((r for r in read if r["id"] == MAIN_BLOCK), read[0])  # drawn: the blocks of the main one's model
    drawn = [r for r in read if r["model"] == main["model"]]
    left_out = [r["id"] for r in read if r["model"] != main["model"]]
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(12.5, 5.0), gridspec_kw={"width_ratios": [1.35, 1]})
    units = {name: unit for r in drawn for name, unit in r["units"].items()}
    recorders = style.registry_order(name for r in drawn for name in r["recorded"])
    tracers = style.registry_order(name for r in drawn for name in r["traced"])
    for side, name in enumerate(recorders):
        mine = sorted((r for r in drawn if name in r["recorded"]), key=lambda r: (r["T"], r["sentences"]))
        ax.plot([r["T"] for r in mine], [r["recorded"][name] for r in mine], style.marker(name), ls="none",
                color=style.colour(name), ms=6, label=f"{name}: recorded for every batch ({units[name]})")
        at = {}  # batches that landed on the same point share one label
        for r in mine:
            at.setdefault((r["T"], r["recorded"][name]), []).append(r)
            others = r["other_trees"].get(name) or {}
            if len(set(others.values())) > 1:  # the same words as other trees: a different graph
                ax.vlines(r["T"], min(others.values()), max(others.values()), color=style.colour(name), lw=3, alpha=0.3)
        for point, batches in at.items():  # left of the first recorder's points, right of the next one's
            ax.annotate(describe(batches), point, xytext=(6 if side % 2 else -6, -3), textcoords="offset points",
                        ha="left" if side % 2 else "right", fontsize=6.5, color=style.colour(name))
    for name in tracers:
        mine = sorted((r for r in drawn if name in r["traced"]), key=lambda r: (r["T"], r["sentences"]))
        t = main["traced"].get(name) or mine[0]["traced"][name]
        ax.plot([r["T"] for r in mine], [r["traced"][name]["size"] for r in mine], ms=5, **style.look(name),
                label=f"{name}: traced once, {t['size']} {t['unit']} ({'while' if t['loop'] == 'while' else 'scan'} "
                      f"bodies {', '.join(map(str, t['bodies']))}, each once)")
    ax.set(ylim=(0, None), xlim=(0, 1.25 * max(r["T"] for r in drawn)),
           xlabel="loop steps T of the batch (transitions per sentence, PAD included)",
           ylabel="size of the loss-and-gradients graph\n(autograd nodes, DyNet nodes, TF ops, jaxpr equations)")
    ax.set_title("each point one batch; shaded bar: the same words arranged as other trees", fontsize=9)
    # The main batch as the same words in other trees: the recorded graph changes, the traced one does not.
    shapes = ["gold"] + list(next(iter(main["other_trees"].values()), {}))
    width = 0.8 / max(1, len(recorders))
    for i, name in enumerate(r for r in recorders if r in main["recorded"]):
        values = [main["recorded"][name]] + [main["other_trees"][name].get(k, 0) for k in shapes[1:]]
        xs = [k + (i - (len(recorders) - 1) / 2) * width for k in range(len(shapes))]
        bars.bar(xs, values, width=width * 0.9, color=style.colour(name), alpha=0.8)
        for x, v in zip(xs, values):
            bars.text(x, v, str(v), ha="center", va="bottom", fontsize=6.5)
    for name in (n for n in tracers if n in main["traced"]):
        bars.axhline(main["traced"][name]["size"], color=style.colour(name), ls=style.linestyle(name), lw=1.5)
    bars.set_xticks(range(len(shapes)), [(f"{main['trees']}\n(its own)" if k == "gold" else k) for k in shapes])
    bars.set(xlabel="the same words arranged as", ylabel="size of the loss-and-gradients graph", ylim=(0, 1.15 * max(
        [max(main["recorded"].values(), default=0), *(t["size"] for t in main["traced"].values()),
         *(max(v.values(), default=0) for v in main["other_trees"].values())])))
    bars.set_title(f"one batch ({main['sentences']} sentences, {main['trees']} trees, T = {main['T']}) as other trees",
                   fontsize=9)
    bars.grid(False, axis="x")
    fig.suptitle("The graph behind one batch's loss and gradients: recorded anew for every batch (grows with the "
                 "steps and the trees) or traced once (each loop body held once)\n"
                 f"python -m bench explain, small model ({main['model']})", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=7.5, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # the legend below both panels: inside either it would cover points
    return fig, {
        "title": "The graph behind one batch's loss and gradients",
        "sources": [{"block": r["source"], "keys": ["<implementation>.graph", f"<implementation>.{OTHER_TREES}",
                                                   "<implementation>.loss_and_grads", "batch", "model"]}
                    for r in drawn],
        "data": {"blocks": [{k: v for k, v in r.items() if k != "source"} for r in drawn], "left_out": left_out}}
