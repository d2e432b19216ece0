"""The suite's one Markdown table."""


def table(header: list[str], rows: list[list]) -> str:
    """A header, its separator, a line per row (the report's tables and the blocks' are all written here)."""
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(map(str, row)) + " |" for row in rows])
