import Foundation
import JSON
import Testing

/// SIGKILL a process that is appending to the log, at random moments, many times over; after each
/// restart every acknowledged record must be there, intact, once, at dense offsets.
@Suite struct LogCrashTests {
    struct Ack: Hashable {
        var offset: Int64
        var device: Int64
        var batchID: String
        var fixes: Int
    }

    @Test func acknowledgedRecordsSurviveSIGKILL() throws {
        let seed = UInt64.random(in: 1...1_000_000)
        print("LogCrashTests seed: \(seed) (the kill moments and the generated batches follow from it)")
        var random = SplitMix(seed: seed)
        let data = ScratchDirectory("findmy-crash")
        var acknowledged: [Ack] = []
        let iterations = 10
        for iteration in 0..<iterations {
            let child = try FindmyProcess(
                [
                    "load", "--data-dir", data.path, "--seconds", "60", "--appenders", "8", "--fixes", "5",
                    "--seed", String(seed &+ UInt64(iteration)),
                ], executable: benchExecutable())
            // A random moment to kill at, from the seed: choosing when, not waiting for anything.
            usleep(UInt32(100_000 + random.next() % 600_000))
            child.kill(SIGKILL)
            #expect(child.wait() != nil)
            let acks = child.outputLines.compactMap(parseAck)
            acknowledged.append(contentsOf: acks)

            // Reopening recovers the log (a torn tail may be cut) and finds it sound.
            let verify = try FindmyProcess.run(["log", "verify", "--json", "--data-dir", data.path])
            #expect(
                verify.status == 0, "seed \(seed), iteration \(iteration): \(verify.output) \(verify.error)")
            let report = try JSONParser.parse(verify.output)
            #expect(report["ok"] == .bool(true))
            let records = try report["records"]?.int64Value ?? -1
            #expect(records >= Int64(acknowledged.count), "seed \(seed): fewer records than acknowledgements")
        }
        #expect(acknowledged.count > 0, "the load generator acknowledged nothing")

        let dump = try FindmyProcess.run(
            ["log", "dump", "--json", "--data-dir", data.path], timeoutSeconds: 300)
        #expect(dump.status == 0, "\(dump.error)")
        var byOffset: [Int64: Ack] = [:]
        var batchIDs = Set<String>()
        var duplicateOffsets = 0
        var duplicateBatches = 0
        for line in dump.output.split(separator: "\n") {
            let record = try JSONParser.parse(String(line))
            let offset = try record["offset"]!.int64Value
            if byOffset[offset] != nil { duplicateOffsets += 1 }
            let batchID = try record["batch_id"]!.stringValue
            if !batchIDs.insert(batchID).inserted { duplicateBatches += 1 }
            byOffset[offset] = Ack(
                offset: offset, device: try record["device"]!.int64Value, batchID: batchID,
                fixes: try record["fixes"]!.arrayValue.count)
        }
        #expect(duplicateOffsets == 0 && duplicateBatches == 0, "seed \(seed): records duplicated")
        #expect(
            byOffset.keys.sorted() == Array(0..<Int64(byOffset.count)), "seed \(seed): offsets are not dense")
        let lost = acknowledged.filter { byOffset[$0.offset] != $0 }
        #expect(
            lost.isEmpty,
            "seed \(seed): \(lost.count) acknowledged records lost or changed, first \(String(describing: lost.first))"
        )
        print(
            "LogCrashTests: \(iterations) kills, \(acknowledged.count) acknowledged records, all present once"
        )
    }

    func parseAck(_ line: String) -> Ack? {
        let parts = line.split(separator: " ")
        guard parts.count == 5, parts[0] == "ack", let offset = Int64(parts[1]), let device = Int64(parts[2]),
            let fixes = Int(parts[4])
        else { return nil }
        return Ack(offset: offset, device: device, batchID: String(parts[3]), fixes: fixes)
    }
}

struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}
