dofile(os.getenv("SBS_LUA") .. "/lib.lua")
-- the JWKS revalidated: 304 Not Modified
get("/v1/keys/dev/jwks.json", { ["If-None-Match"] = os.getenv("SBS_ETAG") })
