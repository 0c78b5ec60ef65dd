-- Shared by the route scripts of bench/sidebyside/run.sh (wrk 4.1).
-- SBS_DATA: directory of the request bodies; SBS_TOKEN: bearer token.
local function readfile(p)
  local f = assert(io.open(p, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

function data(name) return os.getenv("SBS_DATA") .. "/" .. name end

function post(path, bodyfile, headers)
  wrk.method = "POST"
  wrk.path = path
  wrk.body = readfile(data(bodyfile))
  wrk.headers["Content-Type"] = "application/json"
  for k, v in pairs(headers or {}) do wrk.headers[k] = v end
end

function get(path, headers)
  wrk.method = "GET"
  wrk.path = path
  for k, v in pairs(headers or {}) do wrk.headers[k] = v end
end

function bearer() return { Authorization = "Bearer " .. os.getenv("SBS_TOKEN") } end

-- One machine-readable line; latencies in microseconds.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d rps=%.1f p50_us=%d p99_us=%d p999_us=%d bad_status=%d socket_errors=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9),
    e.status, e.connect + e.read + e.write + e.timeout))
end
