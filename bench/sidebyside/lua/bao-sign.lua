dofile(os.getenv("SBS_LUA") .. "/lib.lua")
-- OpenBao transit: sign the payload with an ed25519 key
post("/v1/transit/sign/bench", "bao-sign.json", { ["X-Vault-Token"] = "root" })
