import Foundation
import HTTPClient
import JSON
import Synchronization
import Testing

/// Concurrent clients report while `findmy serve` is SIGKILLed at random moments and restarted.
/// Every batch that got a 200 must be in the log afterwards, exactly once, with the fixes the
/// answer counted. A client that got no answer retries the same batch id after the restart.
@Suite struct IngestCrashTests {
    struct Ack: Equatable {
        var offset: Int64
        var accepted: Int64
    }

    final class Shared: @unchecked Sendable {
        let address = Mutex<String>("")
        let acks = Mutex<[String: Ack]>([:])
        let stop = Atomic<Bool>(false)
        let errors = Mutex<[String]>([])
    }

    @Test func acknowledgedFixesSurviveSIGKILLOfTheServer() throws {
        let seed = UInt64.random(in: 1...1_000_000)
        print("IngestCrashTests seed: \(seed) (kill moments and batch sizes follow from it)")
        var random = SplitMix(seed: seed)
        let data = ScratchDirectory("findmy-ingest-crash")
        let user = try addUser("alice", data: data.path)
        var server = try ServerProcess(data: data.path)
        let shared = Shared()
        shared.address.withLock { $0 = server.address }
        let clients = 6
        let deviceTokens = try (0..<clients).map { index in
            try #require(
                try enrol(
                    HTTPConnection(address: server.address), userToken: user,
                    uuid: String(format: "00000000-0000-4000-8000-%012d", index)
                )
                .string("device_token"))
        }
        let done = DispatchGroup()
        for client in 0..<clients {
            done.enter()
            let clientSeed = seed &+ UInt64(client) &* 7919
            Thread {
                runClient(shared, token: deviceTokens[client], seed: clientSeed)
                done.leave()
            }.start()
        }
        let kills = 6
        for _ in 0..<kills {
            // A random moment to kill at, from the seed: choosing when, not waiting for anything.
            usleep(UInt32(150_000 + random.next() % 500_000))
            server.kill9()
            server = try ServerProcess(data: data.path)
            shared.address.withLock { $0 = server.address }
        }
        // The last server acknowledges batches too before the clients stop.
        let acknowledgedBeforeLastServer = shared.acks.withLock { $0.count }
        #expect(
            waitUntil(timeoutSeconds: 120) {
                shared.acks.withLock { $0.count } > acknowledgedBeforeLastServer
            })
        shared.stop.store(true, ordering: .relaxed)
        done.wait()
        #expect(server.stop() == 0)
        #expect(
            shared.errors.withLock { $0 }.isEmpty, "seed \(seed): \(shared.errors.withLock { $0.prefix(3) })")

        let acks = shared.acks.withLock { $0 }
        #expect(acks.count > 50, "seed \(seed): only \(acks.count) batches acknowledged")
        let batches = try dumpLog(data.path).batches
        var stored: [String: [DumpedBatch]] = [:]
        for batch in batches { stored[batch.batchID, default: []].append(batch) }
        #expect(stored.values.allSatisfy { $0.count == 1 }, "seed \(seed): a batch id is stored twice")
        var missing = 0
        for (batchID, ack) in acks {
            guard let batch = stored[batchID]?.first, batch.offset == ack.offset,
                Int64(batch.fixes.count) == ack.accepted
            else {
                missing += 1
                continue
            }
        }
        #expect(
            missing == 0, "seed \(seed): \(missing) of \(acks.count) acknowledged batches missing or changed")
        print("IngestCrashTests: \(kills) kills, \(acks.count) acknowledged batches, all present once")
    }
}

/// Sends batches of 1 to 20 fixes; on a failed exchange (the server was killed) keeps the batch
/// and resends it, with the same id, to whichever server runs next.
private func runClient(_ shared: IngestCrashTests.Shared, token: String, seed: UInt64) {
    var random = SplitMix(seed: seed)
    var connection: HTTPConnection?
    var connectedTo = ""
    var pending: (id: String, body: String)?
    while !shared.stop.load(ordering: .relaxed) {
        let address = shared.address.withLock { $0 }
        if connection == nil || connectedTo != address {
            connection = HTTPConnection(address: address, reconnect: false, timeoutSeconds: 10)
            connectedTo = address
        }
        if pending == nil {
            let id = UUID().uuidString.lowercased()
            let count = Int(1 + random.next() % 20)
            pending = (
                id, reportBody(batchID: id, fixes: (0..<count).map { fixJSON(latitude: Double($0) / 10) })
            )
        }
        do {
            let answer = try post(connection!, "/api/find-my/report", token: token, body: pending!.body)
            guard answer.status == 200, let offset = answer.int("offset"),
                let accepted = answer.int("accepted")
            else {
                if answer.status == 409 {
                    usleep(50_000)  // a retry's pause, as a phone's: not a synchronisation
                    continue
                }  // the same batch in flight
                shared.errors.withLock { $0.append("status \(answer.status): \(answer.body)") }
                pending = nil
                continue
            }
            let ack = IngestCrashTests.Ack(offset: offset, accepted: accepted)
            shared.acks.withLock { acks in
                if let earlier = acks[pending!.id], earlier != ack {
                    shared.errors.withLock {
                        $0.append("batch \(pending!.id) answered \(earlier) then \(ack)")
                    }
                }
                acks[pending!.id] = ack
            }
            pending = nil
        } catch {
            connection = nil
            usleep(20_000)  // a reconnect's pause while the server restarts, as a phone's
        }
    }
}
