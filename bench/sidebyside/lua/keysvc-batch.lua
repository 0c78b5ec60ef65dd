dofile(os.getenv("SBS_LUA") .. "/lib.lua")
-- keysvc: a batch of 100 payloads
post("/v1/keys/dev/sign:batch", "keysvc-batch.json", bearer())
