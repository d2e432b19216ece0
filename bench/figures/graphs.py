"""The graph behind one batch's loss and gradients, recorded per batch or traced once (the guides' explain blocks).

Every count is of the same thing, the graph one training step runs for one
batch's loss and its gradients, in each framework's own unit:

* PyTorch: the autograd nodes the forward pass recorded, one for each
  differentiable operation Python ran, at every step; ``backward()`` visits
  each once (``<implementation>.graph.recorded``).
* DyNet: the nodes of the loss graph the forward pass built, sentence by
  sentence and step by step; the backward pass walks the same graph.
* TensorFlow: the ops of the traced loss-and-gradients ``tf.function``, plus
  the ops of the bodies and conditions of its while loops (the forward loop
  and its gradient), each body counted once however many steps it runs
  (``<implementation>.loss_and_grads``).
* JAX: the equations of the traced loss-and-gradients jaxpr, nested ones
  (the forward scan's body and the reverse scan's) counted once each
  (``loss_and_grads.eqns_total``).

So the recorded graphs grow with the steps and change with the trees, and
the traced ones stay one program whatever the batch. The counts are read from
the results of the guides' figure blocks (``python -m bench explain --json``,
kept in docs/figures/explain.json by ``explain --sync-guide``), never re-run
here and never parsed out of the blocks' text.
"""

from __future__ import annotations

from bench.figures import style
from bench.figures.sources import Block, Sources

OTHER_TREES = "other_trees"  # the same words in other tree shapes: an implementation's graph size for each
MAIN_BLOCK = "fig-main"  # the guide's first figure: its batch is also drawn as the same words in other trees


def _model(config: dict) -> str:
    return (f"E={config['embed_dim']} H={config['hidden_dim']} D={config['tracker_dim']} M={config['mlp_dim']} "
            f"L={config['mlp_layers']}")


def _traced(value: dict) -> dict | None:
    """The size of a traced loss-and-gradients program: its total and, of it, the loop bodies (each once)."""
    program = value.get("loss_and_grads")
    if not isinstance(program, dict):
        return None
    if "eqns_total" in program:  # a jaxpr: eqns_total already counts the nested scan bodies
        bodies = list(program.get("scan_body_eqns") or [])
        return {"loop": "scan", "size": program["eqns_total"], "outside": program["eqns_total"] - sum(bodies),
                "bodies": bodies, "unit": "equations"}
    if "ops" in program:  # a GraphDef: the while bodies and conditions live in its function library
        bodies, conds = list(program.get("while_body_ops") or []), list(program.get("while_cond_ops") or [])
        return {"loop": "while", "size": program["ops"] + sum(bodies) + sum(conds), "outside": program["ops"],
                "bodies": bodies, "conditions": conds, "unit": "ops"}
    return None


def read_block(block: Block) -> dict | None:
    """The graph sizes an explain block reports (each define-by-run implementation's recorded graph for the
    loss, each static one's traced loss-and-gradients program), or None if it reports none (a bad-input or
    parse block, say)."""
    r = block.result
    batch = r.get("batch") or {}
    if "num_steps" not in batch or "model" not in r:
        return None
    recorded, traced, other, units = {}, {}, {}, {}
    for name, value in r.items():
        graph = value.get("graph") if isinstance(value, dict) else None
        if not isinstance(graph, dict):
            continue
        if "recorded" in graph:
            recorded[name] = graph["recorded"]
            other[name] = dict(value.get(OTHER_TREES) or {})
            # What the count is of, as the implementation's own record names it (PyTorch's autograd_nodes).
            units[name] = "autograd nodes" if "autograd_nodes" in value else "nodes"
        elif "body" in graph and _traced(value) is not None:
            traced[name] = _traced(value)
            units[name] = traced[name]["unit"]
    if not recorded and not traced:
        return None
    return {"id": block.id, "command": block.command, "source": block.source(), "model": _model(r["model"]),
            "pairs": batch["pairs"], "sentences": batch["sentences"], "what": batch["source"],
            "trees": batch["trees"], "N": batch["num_tokens"], "T": batch["num_steps"],
            "recorded": recorded, "other_trees": other, "traced": traced, "units": units}


def describe(batches: list[dict]) -> str:
    """A point's label in words: the batches that landed on it, by sentence count and trees."""
    counts = sorted({b["sentences"] for b in batches})
    kinds = list(dict.fromkeys(b["trees"] for b in batches))
    if len(kinds) == 1 or len(counts) == 1:
        n = " or ".join(map(str, counts))
        return f"{n} sentence{'' if counts == [1] else 's'}, {' or '.join(kinds)} trees"
    return "; ".join(describe([b]) for b in batches)


def graph_blocks(src: Sources) -> tuple[list[dict], list[str]]:
    """The blocks drawn (those of the main figure's model) and the ids of the other graph blocks left out."""
    read = [r for r in (read_block(b) for b in src.blocks()) if r is not None]
    if not read:
        raise ValueError("no explain block in the guides reports graph sizes")
    main = next((r for r in read if r["id"] == MAIN_BLOCK), read[0])
    drawn = [r for r in read if r["model"] == main["model"]]
    return drawn, [r["id"] for r in read if r["model"] != main["model"]]


def _traced_label(name: str, t: dict) -> str:
    bodies = ", ".join(map(str, t["bodies"]))
    what = "while bodies" if t["loop"] == "while" else "scan bodies"
    return f"{name}: traced once, {t['size']} {t['unit']} ({what} {bodies}, each once)"


def graph_size(src: Sources, plt):
    """The graph behind one batch's loss and gradients against the loop steps T, and against the trees of one
    batch: recorded anew for every batch, or traced once."""
    drawn, left_out = graph_blocks(src)
    main = next((r for r in drawn if r["id"] == MAIN_BLOCK), drawn[0])
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
        right = side % 2  # labels left of the first recorder's points, right of the next one's: no collisions
        for point, batches in at.items():
            ax.annotate(describe(batches), point, xytext=(6 if right else -6, -3), textcoords="offset points",
                        ha="left" if right else "right", fontsize=6.5, color=style.colour(name))
        for r in mine:
            others = r["other_trees"].get(name) or {}
            if len(set(others.values())) > 1:  # the same words as other trees: a different graph
                low, high = min(others.values()), max(others.values())
                ax.vlines(r["T"], low, high, color=style.colour(name), lw=3, alpha=0.3)
    for name in tracers:
        mine = sorted((r for r in drawn if name in r["traced"]), key=lambda r: (r["T"], r["sentences"]))
        ax.plot([r["T"] for r in mine], [r["traced"][name]["size"] for r in mine], color=style.colour(name),
                marker=style.marker(name), ls=style.linestyle(name), ms=5,
                label=_traced_label(name, main["traced"].get(name) or mine[0]["traced"][name]))
    ax.set_ylim(bottom=0)
    ax.set_xlim(0, 1.25 * max(r["T"] for r in drawn))
    ax.set_xlabel("loop steps T of the batch (transitions per sentence, PAD included)")
    ax.set_ylabel("size of the loss-and-gradients graph\n(autograd nodes, DyNet nodes, TF ops, jaxpr equations)")
    ax.set_title("each point one batch; shaded bar: the same words arranged as other trees", fontsize=9)
    # The main batch as the same words in other trees: the recorded graph changes, the traced one does not.
    shapes = ["gold"] + [k for k in next(iter(main["other_trees"].values()), {})]
    width = 0.8 / max(1, len(recorders))
    for i, name in enumerate(r for r in recorders if r in main["recorded"]):
        values = [main["recorded"][name]] + [main["other_trees"][name].get(k, 0) for k in shapes[1:]]
        xs = [k + (i - (len(recorders) - 1) / 2) * width for k in range(len(shapes))]
        bars.bar(xs, values, width=width * 0.9, color=style.colour(name), alpha=0.8)
        for x, v in zip(xs, values):
            bars.text(x, v, str(v), ha="center", va="bottom", fontsize=6.5)
    for name in tracers:
        if name in main["traced"]:
            size = main["traced"][name]["size"]
            bars.axhline(size, color=style.colour(name), ls=style.linestyle(name), lw=1.5)
    bars.set_xticks(range(len(shapes)), [(f"{main['trees']}\n(its own)" if k == "gold" else k) for k in shapes])
    bars.set_xlabel("the same words arranged as")
    bars.set_ylabel("size of the loss-and-gradients graph")
    bars.set_title(f"one batch ({main['sentences']} sentences, {main['trees']} trees, T = {main['T']}) "
                   "as other trees", fontsize=9)
    tops = [max(main["recorded"].values(), default=0), *(t["size"] for t in main["traced"].values()),
            *(max(v.values(), default=0) for v in main["other_trees"].values())]
    bars.set_ylim(0, 1.15 * max(tops))
    bars.grid(False, axis="x")
    fig.suptitle("The graph behind one batch's loss and gradients: recorded anew for every batch (grows with the "
                 "steps and the trees) or traced once (each loop body held once)\n"
                 f"python -m bench explain, small model ({main['model']})", fontsize=10)
    # One legend for both panels, below them: inside either it would cover points or their labels.
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7.5, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    traced_words = {
        "while": "the ops of the traced loss-and-gradients graph plus those of its while loops' bodies and "
                 "conditions (the forward loop and its gradient), each counted once",
        "scan": "the equations of the traced loss-and-gradients jaxpr, the forward and reverse scans' bodies "
                "counted once each",
    }
    loops = {t["loop"]: name for r in drawn for name, t in r["traced"].items()}
    entry = {
        "title": "The graph behind one batch's loss and gradients",
        "caption": ("The size of what computes one batch's loss and its gradients, against the loop steps T "
                    f"(left) and for one batch of {main['what']}, its words arranged as other trees (right). "
                    + " ".join(
                        [f"{name}: the {units[name]} the forward pass recorded for the loss, every step's "
                         "operations anew for each batch (the backward pass walks them)." for name in recorders]
                        + [f"{name}: {traced_words[loop]}, one program for every batch." for loop, name in
                           sorted(loops.items(), key=lambda kv: tracers.index(kv[1]))])
                    + f" Each framework counts in its own unit. From the guides' explain blocks (python -m bench "
                    f"explain; model {main['model']})."),
        "sources": [{"block": r["source"], "keys": ["<implementation>.graph", f"<implementation>.{OTHER_TREES}",
                                                   "<implementation>.loss_and_grads", "batch", "model"]}
                    for r in drawn],
        "data": {"blocks": [{k: v for k, v in r.items() if k != "source"} for r in drawn],
                 "left_out": left_out},
    }
    return fig, entry
