"""The unrolled graph against one loop body, from the guides' ``explain`` blocks.

Define-by-run code records a graph as it runs: PyTorch's autograd graph (and
DyNet's) has a node for every operation of every step, so it grows with the
steps and changes with the trees. TensorFlow's while loop and JAX's scan hold
the step once, as a loop body whose size no batch changes. The counts are
read from the results of the guides' figure blocks (``python -m bench explain
--json``, kept in docs/figures/explain.json by ``explain --sync-guide``), never
re-run here and never parsed out of the blocks' text.
"""

from __future__ import annotations

from bench.figures import style
from bench.figures.sources import Block, Sources

OTHER_TREES = "other_trees"  # the same words in other tree shapes: an implementation's graph size for each
MAIN_BLOCK = "fig-main"  # the guide's first figure: its batch is also drawn as the same words in other trees


def _model(config: dict) -> str:
    return (f"E={config['embed_dim']} H={config['hidden_dim']} D={config['tracker_dim']} M={config['mlp_dim']} "
            f"L={config['mlp_layers']}")


def read_block(block: Block) -> dict | None:
    """The graph sizes an explain block reports (each implementation's ``graph`` summary: the nodes it recorded
    for the loss, or its loop body's size), or None if it reports none (a bad-input or parse block, say)."""
    r = block.result
    batch = r.get("batch") or {}
    if "num_steps" not in batch or "model" not in r:
        return None
    recorded, bodies, other = {}, {}, {}
    for name, value in r.items():
        graph = value.get("graph") if isinstance(value, dict) else None
        if not isinstance(graph, dict):
            continue
        if "recorded" in graph:
            recorded[name] = graph["recorded"]
            other[name] = dict(value.get(OTHER_TREES) or {})
        if "body" in graph:
            bodies[name] = {"loop": graph["loop"], "size": graph["body"]}
    if not recorded and not bodies:
        return None
    return {"id": block.id, "command": block.command, "source": block.source(), "model": _model(r["model"]),
            "pairs": batch["pairs"], "sentences": batch["sentences"], "what": batch["source"],
            "N": batch["num_tokens"], "T": batch["num_steps"], "recorded": recorded, "other_trees": other,
            "loop_body": bodies}


def graph_blocks(src: Sources) -> tuple[list[dict], list[str]]:
    """The blocks drawn (those of the main figure's model) and the ids of the other graph blocks left out."""
    read = [r for r in (read_block(b) for b in src.blocks()) if r is not None]
    if not read:
        raise ValueError("no explain block in the guides reports graph sizes")
    main = next((r for r in read if r["id"] == MAIN_BLOCK), read[0])
    drawn = [r for r in read if r["model"] == main["model"]]
    return drawn, [r["id"] for r in read if r["model"] != main["model"]]


def graph_size(src: Sources, plt):
    """Recorded graph nodes against loop steps, and against the trees of one batch; the loop bodies beside."""
    drawn, left_out = graph_blocks(src)
    main = next((r for r in drawn if r["id"] == MAIN_BLOCK), drawn[0])
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(11.5, 4.6), gridspec_kw={"width_ratios": [1.35, 1]})
    recorders = style.registry_order(name for r in drawn for name in r["recorded"])
    loops = style.registry_order(name for r in drawn for name in r["loop_body"])
    for side, name in enumerate(recorders):
        mine = sorted((r for r in drawn if name in r["recorded"]), key=lambda r: (r["T"], r["sentences"]))
        ax.plot([r["T"] for r in mine], [r["recorded"][name] for r in mine], style.marker(name), ls="none",
                color=style.colour(name), ms=6, label=f"{name}: nodes recorded for the loss")
        at = {}  # blocks that landed on the same point share one label
        for r in mine:
            at.setdefault((r["T"], r["recorded"][name]), []).append(f"{r['id']} ({r['sentences']} sent.)")
        right = side % 2  # labels left of the first recorder's points, right of the next one's: no collisions
        for point, labels in at.items():
            ax.annotate(", ".join(labels), point, xytext=(6 if right else -6, -3), textcoords="offset points",
                        ha="left" if right else "right", fontsize=6.5, color=style.colour(name))
        for r in mine:
            others = r["other_trees"].get(name) or {}
            if len(set(others.values())) > 1:  # the same words as other trees: a different graph
                low, high = min(others.values()), max(others.values())
                ax.vlines(r["T"], low, high, color=style.colour(name), lw=3, alpha=0.3)
    for name in loops:
        mine = sorted((r for r in drawn if name in r["loop_body"]), key=lambda r: r["T"])
        loop = mine[0]["loop_body"][name]["loop"]
        ax.plot([r["T"] for r in mine], [r["loop_body"][name]["size"] for r in mine], color=style.colour(name),
                marker=style.marker(name), ls=style.linestyle(name),
                label=f"{name}: {loop} body ({'ops' if loop == 'while' else 'equations'})")
    ax.set_ylim(bottom=0)
    ax.set_xlim(0, 1.25 * max(r["T"] for r in drawn))
    ax.set_xlabel("loop steps T (transitions per sentence, PAD included)")
    ax.set_ylabel("graph size (nodes, ops or equations)")
    ax.set_title("grows with the steps, or one loop body (shaded: the same words as other trees)", fontsize=9)
    ax.legend(loc="upper left", fontsize=7)
    # The main batch as the same words in other trees: the recorded graph changes, the loop body does not.
    shapes = ["gold"] + [k for k in next(iter(main["other_trees"].values()), {})]
    width = 0.8 / max(1, len(recorders))
    for i, name in enumerate(r for r in recorders if r in main["recorded"]):
        values = [main["recorded"][name]] + [main["other_trees"][name].get(k, 0) for k in shapes[1:]]
        xs = [k + (i - (len(recorders) - 1) / 2) * width for k in range(len(shapes))]
        bars.bar(xs, values, width=width * 0.9, color=style.colour(name), alpha=0.8, label=name)
        for x, v in zip(xs, values):
            bars.text(x, v, str(v), ha="center", va="bottom", fontsize=6.5)
    for name in loops:
        if name in main["loop_body"]:
            size = main["loop_body"][name]["size"]
            bars.axhline(size, color=style.colour(name), ls=style.linestyle(name), lw=1.5,
                         label=f"{name}: {main['loop_body'][name]['loop']} body, every tree")
    bars.set_xticks(range(len(shapes)), [("gold (its parse)" if k == "gold" else k) for k in shapes])
    bars.set_ylabel("graph size")
    bars.set_title(f"{main['id']}: {main['pairs']} pairs, T = {main['T']}, the same words as other trees",
                   fontsize=9)
    bars.set_ylim(0, 1.3 * max(max(main["recorded"].values()), *(max(v.values(), default=0)
                                                               for v in main["other_trees"].values())))
    bars.legend(loc="upper center", ncol=2, fontsize=7)
    bars.grid(False, axis="x")
    fig.suptitle("The unrolled graph against one loop body (python -m bench explain, small model)", fontsize=10)
    fig.tight_layout()
    entry = {
        "title": "The unrolled graph against one loop body",
        "caption": ("Nodes that define-by-run code recorded for one batch's loss against the loop steps T, and the "
                    "encoder's loop body of the static versions, from the guides' explain blocks "
                    f"({', '.join(r['id'] for r in drawn)}; model {main['model']})."),
        "sources": [{"block": r["source"], "keys": ["<implementation>.graph", f"<implementation>.{OTHER_TREES}",
                                                   "batch", "model"]} for r in drawn],
        "data": {"blocks": [{k: v for k, v in r.items() if k != "source"} for r in drawn],
                 "left_out": left_out},
    }
    return fig, entry
