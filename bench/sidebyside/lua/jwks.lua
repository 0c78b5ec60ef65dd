dofile(os.getenv("SBS_LUA") .. "/lib.lua")
-- the JWKS (keysvc, or the floor serving the same bytes)
get("/v1/keys/dev/jwks.json")
