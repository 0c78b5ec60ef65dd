dofile(os.getenv("SBS_LUA") .. "/lib.lua")
-- keysvc: one VRP MCP transport assertion
post("/v1/keys/dev/mcp-transport", "keysvc-mcp.json", bearer())
