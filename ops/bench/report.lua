-- wrk script for `findmy-bench ingest --client wrk` (Sources/findmy-bench/WrkDriver.swift and
-- LoadTarget.swift): posts one endpoint's requests, native reports or an app's messages.
--
-- Environment, read once per wrk thread:
--   FINDMY_BENCH_PATH            the path to POST to
--   FINDMY_BENCH_AUTHORIZATIONS  a file with one Authorization value per line, one per device
--   FINDMY_BENCH_HEADERS         a file with the other headers, one "Name: value" a line
--   FINDMY_BENCH_BODY_PREFIX     a file holding the body up to its unique id
--   FINDMY_BENCH_BODY_SUFFIX     a file holding the body after its unique id
--   FINDMY_BENCH_THREADS         wrk's thread count
--   FINDMY_BENCH_UNIQUE          `digits`: the unique id as 11 decimal digits (a body that
--                                carries it in a number, as Overland's does), else a UUID
--   FINDMY_BENCH_RECORDED_FROM_MS  when set (epoch milliseconds), the body suffix holds the marker
--                                @RECORDED_AT@ once, replaced in each request by an RFC 3339 time
--                                that many milliseconds plus the thread's request counter: every
--                                request a different fix, as a phone's reports are (the projector's
--                                history keeps one row per fix; the same fix again is a duplicate)
-- Builds before the apps' phases (their WrkDriver sets only FINDMY_BENCH_TOKENS, a file of device
-- tokens, and FINDMY_BENCH_FIXES, the fix objects of one batch) get native reports as before, so
-- that old and new builds can still be compared with this script.
-- wrk's Lua cannot tell which connection a request goes out on, so each thread takes every
-- `threads`-th device and rotates through its share one request at a time: with 64 connections
-- and 64 devices each device has about one request in flight. Every request's body carries a fresh
-- unique id in UUID form (run nonce, thread number, counter): a native batch_id, or for an app
-- without batch ids a body that differs, so none is answered as a duplicate.
-- done() prints one JSON line that the Swift side parses: requests, non-2xx answers, socket
-- errors, duration and latency percentiles in microseconds.

local threads = {}
local thread_count = 0

function setup(thread)
   thread_count = thread_count + 1
   thread:set("thread_number", thread_count)
   table.insert(threads, thread)
end

local function read_file(path)
   local file = assert(io.open(path, "rb"), "cannot open " .. tostring(path))
   local text = file:read("*a")
   file:close()
   return text
end

local path = "/"
local headers_by_device = {}
local next_device = 1
local prefix, suffix = "", ""
local counter = 0
local nonce = 0
local digits = false
local recorded_from_ms = nil
local suffix_before, suffix_after = "", ""
local cached_second, cached_text = nil, ""

function init(args)
   local all = {}
   local headers = {}
   if os.getenv("FINDMY_BENCH_PATH") == nil then
      path = "/api/find-my/report"
      headers["Content-Type"] = "application/json"
      for line in read_file(os.getenv("FINDMY_BENCH_TOKENS")):gmatch("[^\n]+") do
         table.insert(all, "Bearer " .. line)
      end
      prefix = '{"batch_id": "'
      suffix = '", "fixes": [' .. read_file(os.getenv("FINDMY_BENCH_FIXES")):gsub("%s+$", "") .. ']}'
   else
      path = os.getenv("FINDMY_BENCH_PATH")
      for line in read_file(os.getenv("FINDMY_BENCH_HEADERS")):gmatch("[^\n]+") do
         local name, value = line:match("^([^:]+):%s*(.*)$")
         headers[name] = value
      end
      for line in read_file(os.getenv("FINDMY_BENCH_AUTHORIZATIONS")):gmatch("[^\n]+") do
         table.insert(all, line)
      end
      prefix = read_file(os.getenv("FINDMY_BENCH_BODY_PREFIX"))
      suffix = read_file(os.getenv("FINDMY_BENCH_BODY_SUFFIX"))
   end
   local count = tonumber(os.getenv("FINDMY_BENCH_THREADS") or "1")
   for index = thread_number, #all, count do
      local device = { ["Authorization"] = all[index] }
      for name, value in pairs(headers) do device[name] = value end
      table.insert(headers_by_device, device)
   end
   assert(#headers_by_device > 0, "no device for thread " .. thread_number)
   nonce = os.time() % 0x100000000
   digits = os.getenv("FINDMY_BENCH_UNIQUE") == "digits"
   recorded_from_ms = tonumber(os.getenv("FINDMY_BENCH_RECORDED_FROM_MS") or "")
   if recorded_from_ms ~= nil then
      local first, last = suffix:find("@RECORDED_AT@", 1, true)
      assert(first ~= nil, "FINDMY_BENCH_RECORDED_FROM_MS needs @RECORDED_AT@ in the body suffix")
      suffix_before, suffix_after = suffix:sub(1, first - 1), suffix:sub(last + 1)
   end
end

-- base + counter milliseconds as RFC 3339 UTC; the seconds' text is formatted once a second.
local function recorded_at(counter)
   local ms = recorded_from_ms + counter
   local second = math.floor(ms / 1000)
   if second ~= cached_second then
      cached_second = second
      cached_text = os.date("!%Y-%m-%dT%H:%M:%S", second)
   end
   return cached_text .. string.format(".%03dZ", ms % 1000)
end

function request()
   counter = counter + 1
   local unique
   if digits then
      unique = string.format("%04d%01d%06d", nonce % 10000, thread_number % 10, counter % 1000000)
   else
      unique = string.format("%08x-%04x-4000-8000-%012x", nonce, thread_number, counter)
   end
   local headers = headers_by_device[next_device]
   next_device = next_device % #headers_by_device + 1
   if recorded_from_ms ~= nil then
      return wrk.format(
         "POST", path, headers, prefix .. unique .. suffix_before .. recorded_at(counter) .. suffix_after)
   end
   return wrk.format("POST", path, headers, prefix .. unique .. suffix)
end

function done(summary, latency, requests)
   local errors = summary.errors
   io.write(string.format(
      '{"requests": %d, "non_2xx": %d, "socket_errors": %d, "duration_us": %d, '
         .. '"p50_us": %d, "p99_us": %d, "max_us": %d}\n',
      summary.requests, errors.status,
      errors.connect + errors.read + errors.write + errors.timeout,
      summary.duration, latency:percentile(50), latency:percentile(99), latency.max))
end
