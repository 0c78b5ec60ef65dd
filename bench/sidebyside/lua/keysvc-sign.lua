dofile(os.getenv("SBS_LUA") .. "/lib.lua")
-- keysvc: one JWS over the payload
post("/v1/keys/dev/sign", "keysvc-sign.json", bearer())
