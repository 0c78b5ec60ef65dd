dofile(os.getenv("SBS_LUA") .. "/lib.lua")
-- OpenBao transit: batch_input of the same 100 payloads
post("/v1/transit/sign/bench", "bao-batch.json", { ["X-Vault-Token"] = "root" })
