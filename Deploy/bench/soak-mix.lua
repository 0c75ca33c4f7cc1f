-- wrk script of Deploy/bench/soak.sh: a mixed anonymous read load on one app, cycling the live
-- manifest, the first page of /releases, /channels, a release by number (any of 1…live, at
-- random), the Info.plist keys, a device report about the live release and /healthz. The live
-- release number is read from SOAK_LIVE_FILE (the publisher loop writes it) every 256 requests
-- of a thread. Counts answers by status; done() prints them, one "status count" per line.
local app, pack, live_file = os.getenv("SOAK_APP"), os.getenv("SOAK_PACK"), os.getenv("SOAK_LIVE_FILE")
local base = "/v1/apps/" .. app
local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

local live, n = 1, 0
local counts = {}
local function read_live()
  local f = io.open(live_file, "r")
  if f then
    local v = tonumber(f:read("*l") or "")
    f:close()
    if v then live = v end
  end
end

function init(args)
  math.randomseed(os.time() * 7 + (id or 1))
  read_live()
end

local kinds = { "manifest", "releases", "channels", "release", "info-plist", "report", "healthz" }
local json = { ["Content-Type"] = "application/json" }

function request()
  n = n + 1
  if n % 256 == 0 then read_live() end
  local kind = kinds[(n - 1) % #kinds + 1]
  if kind == "manifest" then return wrk.format("GET", base .. "/manifest")
  elseif kind == "releases" then return wrk.format("GET", base .. "/releases")
  elseif kind == "channels" then return wrk.format("GET", base .. "/channels")
  elseif kind == "release" then return wrk.format("GET", base .. "/releases/" .. math.random(1, live))
  elseif kind == "info-plist" then return wrk.format("GET", base .. "/info-plist")
  elseif kind == "report" then
    local body = string.format('{"channel":"production","release":%d,"packs":[{"id":"%s","revision":1,"outcome":"installed","bytes":10}]}', live, pack)
    return wrk.format("POST", base .. "/reports", json, body)
  else return wrk.format("GET", "/healthz") end
end

function response(status, headers, body)
  counts[status] = (counts[status] or 0) + 1
  -- Exposed to done() through the thread's globals.
  _G["status_" .. status] = counts[status]
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for _, status in ipairs({ 200, 202, 304, 400, 404, 409, 422, 429, 500, 503 }) do
      local c = thread:get("status_" .. status)
      if c then total[status] = (total[status] or 0) + c end
    end
  end
  for status, c in pairs(total) do io.write(string.format("status %d %d\n", status, c)) end
end
