-- wrk script for POST /api/find-my/report, used by `findmy-bench ingest --client wrk`
-- (Sources/findmy-bench/IngestBench.swift and WrkDriver.swift).
--
-- Environment, read once per wrk thread:
--   FINDMY_BENCH_TOKENS  a file with one device token per line (enrolled beforehand)
--   FINDMY_BENCH_FIXES   a file holding the comma-separated fix objects of one batch
-- wrk's Lua cannot tell which connection a request goes out on, so each thread takes every
-- `threads`-th token and rotates through its share one request at a time: with 64 connections
-- and 64 tokens each device has about one request in flight. Every request carries a fresh
-- batch_id (run nonce, thread number, counter), so none is answered as a duplicate.
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
   local file = assert(io.open(path, "r"), "cannot open " .. tostring(path))
   local text = file:read("*a")
   file:close()
   return text
end

local tokens = {}
local headers_by_token = {}
local next_token = 1
local fixes = ""
local counter = 0
local nonce = 0

function init(args)
   local all = {}
   for line in read_file(os.getenv("FINDMY_BENCH_TOKENS")):gmatch("[^\n]+") do
      table.insert(all, line)
   end
   local count = tonumber(os.getenv("FINDMY_BENCH_THREADS") or "1")
   for index = thread_number, #all, count do
      table.insert(tokens, all[index])
   end
   assert(#tokens > 0, "no device token for thread " .. thread_number)
   for index, token in ipairs(tokens) do
      headers_by_token[index] = {
         ["Authorization"] = "Bearer " .. token,
         ["Content-Type"] = "application/json",
      }
   end
   fixes = read_file(os.getenv("FINDMY_BENCH_FIXES")):gsub("%s+$", "")
   nonce = os.time() % 0x100000000
end

function request()
   counter = counter + 1
   local batch_id = string.format(
      "%08x-%04x-4000-8000-%012x", nonce, thread_number, counter)
   local headers = headers_by_token[next_token]
   next_token = next_token % #tokens + 1
   local body = '{"batch_id": "' .. batch_id .. '", "fixes": [' .. fixes .. ']}'
   return wrk.format("POST", "/api/find-my/report", headers, body)
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
