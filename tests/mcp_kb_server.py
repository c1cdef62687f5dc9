"""A real MCP server over stdio, for the MCP visibility gate: two knowledge-base tools."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("kb")


@server.tool()
def kb_search(query: str) -> str:
    """Search the knowledge base."""
    return f"found 3 articles on {query}"


@server.tool()
def kb_delete(article_id: str) -> str:
    """Delete an article."""
    return f"deleted {article_id}"


if __name__ == "__main__":
    server.run("stdio")
