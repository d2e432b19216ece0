"""``python -m bench figures``: the figures of docs/figures/ (index.py lists them), in the style of style.py."""


def register(sub) -> None:
    from bench.check import cmd_check

    p = sub.add_parser("figures", help="redraw docs/figures/ (render --only figures; --check: check --only figures)")
    p.add_argument("--check", action="store_true", help="the same as python -m bench check --only figures")
    p.set_defaults(func=cmd_check, write=True, paths=[], only="figures", redraw=True)
