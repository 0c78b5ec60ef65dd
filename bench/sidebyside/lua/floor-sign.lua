dofile(os.getenv("SBS_LUA") .. "/lib.lua")
-- the net/http floor (keysvc bench-floor --sign): Ed25519 over the payload itself
post("/", "payload.json")
