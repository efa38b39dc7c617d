from agentweb.runtime import tool


@tool(name="lookup")
def other_lookup(x: int) -> int:
    """Another tool with a taken name."""
    return x
