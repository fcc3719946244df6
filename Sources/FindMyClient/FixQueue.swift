import JSON
import Synchronization

// The durable queue of fixes on the device: a directory of batch files.
//
// Files (names are a 16-digit sequence number, increasing, and a suffix):
//   <seq>.open     the batch being filled; at most one.
//   <seq>.batch    a sealed batch, sent as it is until the server answers 2xx, then removed.
//   <seq>.refused  a batch the server refused as a whole (400/413): kept for a person to read,
//                  never sent again.
//   <seq>.tmp      a reply batch being written; removed on open (it was never sent).
// A batch file is lines ended by LF. Line 1 is the header `{"batch_id": UUID, "created_at_micros":
// N, "in_reply_to": UUID or null}`; each further line is one fix exactly as a report's `fixes[]`
// carries it.
//
// Rules, and why they give "nothing lost, nothing twice":
//  1. A fix is appended to the open file and fsynced before `append` returns: once taken, it
//     survives a crash.
//  2. The batch id is in the header, written and fsynced with the file's first fix, so it is
//     chosen before the batch can be sent and a resend after a crash or timeout carries the same id
//     (the server answers a known id as a duplicate without storing anything).
//  3. A batch is sealed (renamed .open -> .batch, directory fsynced) before its first send, and
//     a sealed file never changes: every send of a batch has the same fixes.
//  4. A batch file is removed only after the server's 2xx.
//  5. On open, a torn last line of the open file (a crash mid-append: never acknowledged) is cut
//     off; an open file with no whole header line is removed (it held no acknowledged fix).
// Sealing: by count at `batchFixesMax` fixes; by age at `batchAgeSeconds` after the first fix, but
// only while no sealed batch waits, so that offline a week of fixes is a few full batches, not
// thousands of one-fix ones. Reply batches (an answer to a command) are sealed at once and go first.

/// A sealed batch as it is sent.
public struct QueuedBatch: Sendable, Equatable {
    /// The file's name in the queue directory.
    public var fileName: String
    public var batchID: String
    public var inReplyTo: String?
    /// The fixes' JSON, one per element, as stored.
    public var fixLines: [String]

    /// The body of `POST /api/find-my/report`.
    public var reportBody: [UInt8] {
        Wire.reportBody(batchID: batchID, inReplyTo: inReplyTo, fixLines: fixLines.map { $0[...] })
    }
}

public final class FixQueue: Sendable {
    public let directory: String
    /// A batch is sealed when it holds this many fixes (the server takes at most 10,000).
    public let batchFixesMax: Int
    /// A batch is sealed this long after its first fix, when no other batch waits.
    public let batchAgeSeconds: Double

    private struct Header {
        var batchID: String
        var createdAtMicros: Int64
        var inReplyTo: String?

        init(batchID: String, createdAtMicros: Int64, inReplyTo: String?) {
            self.batchID = batchID
            self.createdAtMicros = createdAtMicros
            self.inReplyTo = inReplyTo
        }

        init(_ line: some Collection<UInt8>) throws {
            let object = try JSONParser.parse(Array(line)).objectValue
            batchID = try object.string("batch_id")
            createdAtMicros = try object.int64("created_at_micros")
            inReplyTo = try object.stringIfPresent("in_reply_to")
        }

        var line: String {
            String(
                decoding: JSONWriter.encode(
                    .object([
                        "batch_id": .string(batchID), "created_at_micros": .integer(createdAtMicros),
                        "in_reply_to": inReplyTo.map { .string($0) } ?? .null,
                    ])), as: UTF8.self)
        }
    }

    private struct OpenBatch {
        var seq: UInt64
        var fd: Int32
        var fixCount: Int
        var createdAtMicros: Int64
    }

    private struct State {
        var nextSeq: UInt64 = 1
        var open: OpenBatch?
        /// Sealed batches by sequence number; replies are sent first.
        var sealed: [UInt64] = []
        var replies: Set<UInt64> = []
        /// The newest fix taken, as stored (for answering sound and found).
        var newestFixLine: String?
    }

    private let state: Mutex<State>

    /// Opens (creating) the queue in `directory`, recovering what a crash left (rule 5).
    public init(directory: String, batchFixesMax: Int = 100, batchAgeSeconds: Double = 60) throws {
        precondition(batchFixesMax >= 1 && batchFixesMax <= 10_000, "batchFixesMax must be within 1...10000")
        self.directory = directory
        self.batchFixesMax = batchFixesMax
        self.batchAgeSeconds = batchAgeSeconds
        try QueueFiles.makeDirectories(directory)
        state = Mutex(try Self.recover(directory))
    }

    deinit {
        state.withLock { if let open = $0.open { QueueFiles.close(open.fd) } }
    }

    /// Appends `fixes` to the open batch and fsyncs once; sealing by count as they go. Fixes whose
    /// position is not a finite number are skipped (returned count excludes them).
    @discardableResult
    public func append(_ fixes: [ClientFix], nowMicros: Int64 = ClientClock.nowMicros()) throws -> Int {
        let lines = fixes.compactMap(Wire.fixJSON)
        guard !lines.isEmpty else { return 0 }
        try state.withLock { state in
            var index = 0
            while index < lines.count {
                if state.open == nil { state.open = try openBatch(&state, nowMicros: nowMicros) }
                let room = batchFixesMax - state.open!.fixCount
                let piece = lines[index..<min(lines.count, index + room)]
                let bytes = Array((piece.joined(separator: "\n") + "\n").utf8)
                try QueueFiles.appendAndSync(state.open!.fd, bytes, path: path(state.open!.seq, "open"))
                state.open!.fixCount += piece.count
                index += piece.count
                if state.open!.fixCount >= batchFixesMax { try seal(&state) }
            }
            state.newestFixLine = lines.last
        }
        return lines.count
    }

    /// Writes a batch of its own answering `commandID` with `fixLine` (as stored), sealed at once.
    public func appendReply(
        fixLine: String, inReplyTo commandID: String, nowMicros: Int64 = ClientClock.nowMicros()
    )
        throws
    {
        try state.withLock { state in
            let seq = state.nextSeq
            state.nextSeq += 1
            let header = headerLine(inReplyTo: commandID, nowMicros: nowMicros)
            try QueueFiles.writeDurably(
                Array((header + "\n" + fixLine + "\n").utf8), to: path(seq, "batch"),
                temporary: path(seq, "tmp"))
            state.sealed.append(seq)
            state.replies.insert(seq)
        }
    }

    /// A fix as `appendReply` takes it.
    public static func line(_ fix: ClientFix) -> String? { Wire.fixJSON(fix) }

    /// The newest fix taken, as stored; nil before the first.
    public var newestFixLine: String? { state.withLock { $0.newestFixLine } }

    /// Seals the open batch when it is old enough and nothing else waits; returns when to look again,
    /// in the clock's microseconds (nil: no open batch).
    public func sealIfDue(nowMicros: Int64 = ClientClock.nowMicros()) throws -> Int64? {
        try state.withLock { state in
            guard let open = state.open else { return nil }
            let due = open.createdAtMicros + Int64(batchAgeSeconds * 1_000_000)
            guard state.sealed.isEmpty else { return due }
            if nowMicros >= due {
                try seal(&state)
                return nil
            }
            return due
        }
    }

    /// Seals the open batch now, whatever its age (before the program stops, or a flush).
    public func sealNow() throws {
        try state.withLock { state in if state.open != nil { try seal(&state) } }
    }

    /// The batch to send next: a reply first, else the oldest sealed one; nil when none is sealed.
    public func nextBatch() throws -> QueuedBatch? {
        let seq: UInt64? = state.withLock { state in
            state.sealed.filter { state.replies.contains($0) }.min() ?? state.sealed.min()
        }
        guard let seq else { return nil }
        let name = Self.name(seq, "batch")
        guard let bytes = try QueueFiles.read(directory + "/" + name) else {
            throw QueueFileError(operation: "read", path: directory + "/" + name, errno: 2)
        }
        var lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
        let header = try Header(lines.removeFirst().utf8)
        return QueuedBatch(
            fileName: name, batchID: header.batchID, inReplyTo: header.inReplyTo, fixLines: lines)
    }

    /// Removes a batch the server has stored (its 2xx).
    public func remove(_ batch: QueuedBatch) throws {
        try QueueFiles.remove(directory + "/" + batch.fileName)
        forget(batch)
    }

    /// Renames a batch the server refused as a whole to `.refused`: kept, never sent again.
    public func setAside(_ batch: QueuedBatch) throws {
        let refused = batch.fileName.replacingSuffix(".batch", with: ".refused")
        try QueueFiles.rename(directory + "/" + batch.fileName, to: directory + "/" + refused)
        forget(batch)
    }

    /// Fixes not yet sent (sealed or not) and sealed batches waiting.
    public var counts: (openFixes: Int, sealedBatches: Int) {
        state.withLock { ($0.open?.fixCount ?? 0, $0.sealed.count) }
    }

    /// What a queue directory holds, read without changing anything (another process may be
    /// writing it): sealed batches, fixes in them and in the open one, and refused batches.
    public static func inspect(directory: String) throws -> (batches: Int, fixes: Int, refused: Int) {
        var result = (batches: 0, fixes: 0, refused: 0)
        let names = (try? QueueFiles.names(in: directory)) ?? []
        for name in names
        where name.hasSuffix(".batch") || name.hasSuffix(".open") || name.hasSuffix(".refused") {
            if name.hasSuffix(".refused") {
                result.refused += 1
                continue
            }
            if name.hasSuffix(".batch") { result.batches += 1 }
            let bytes = try QueueFiles.read(directory + "/" + name) ?? []
            result.fixes += max(0, bytes.split(separator: UInt8(ascii: "\n")).count - 1)
        }
        return result
    }

    private func forget(_ batch: QueuedBatch) {
        guard let seq = UInt64(batch.fileName.prefix(16)) else { return }
        state.withLock { state in
            state.sealed.removeAll { $0 == seq }
            state.replies.remove(seq)
        }
    }

    private func openBatch(_ state: inout State, nowMicros: Int64) throws -> OpenBatch {
        let seq = state.nextSeq
        state.nextSeq += 1
        let filePath = path(seq, "open")
        let fd = try QueueFiles.openForAppend(filePath)
        do {
            try QueueFiles.appendAndSync(
                fd, Array((headerLine(inReplyTo: nil, nowMicros: nowMicros) + "\n").utf8), path: filePath)
            try QueueFiles.syncDirectory(of: filePath)
        } catch {
            QueueFiles.close(fd)
            throw error
        }
        return OpenBatch(seq: seq, fd: fd, fixCount: 0, createdAtMicros: nowMicros)
    }

    private func seal(_ state: inout State) throws {
        guard let open = state.open else { return }
        QueueFiles.close(open.fd)
        state.open = nil
        guard open.fixCount > 0 else {
            try QueueFiles.remove(path(open.seq, "open"))
            return
        }
        try QueueFiles.rename(path(open.seq, "open"), to: path(open.seq, "batch"))
        state.sealed.append(open.seq)
    }

    private func headerLine(inReplyTo: String?, nowMicros: Int64) -> String {
        Header(batchID: ClientClock.randomUUID(), createdAtMicros: nowMicros, inReplyTo: inReplyTo).line
    }

    private func path(_ seq: UInt64, _ suffix: String) -> String {
        directory + "/" + Self.name(seq, suffix)
    }

    static func name(_ seq: UInt64, _ suffix: String) -> String {
        let digits = String(seq)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits + "." + suffix
    }

    /// The state a directory holds after any crash (rule 5).
    private static func recover(_ directory: String) throws -> State {
        var state = State()
        var opens: [UInt64] = []
        for name in try QueueFiles.names(in: directory).sorted() {
            let parts = name.split(separator: ".")
            guard parts.count == 2, parts[0].count == 16, let seq = UInt64(parts[0]) else { continue }
            state.nextSeq = max(state.nextSeq, seq + 1)
            switch parts[1] {
            case "tmp": try QueueFiles.remove(directory + "/" + name)
            case "batch":
                state.sealed.append(seq)
                let bytes = try QueueFiles.read(directory + "/" + name) ?? []
                if let header = bytes.split(separator: UInt8(ascii: "\n")).first,
                    let decoded = try? Header(header),
                    decoded.inReplyTo != nil
                {
                    state.replies.insert(seq)
                }
            case "open": opens.append(seq)
            default: continue
            }
        }
        // Only one open batch is ever written; should a crash between two renames have left more,
        // the older ones are sealed as they are.
        for (index, seq) in opens.enumerated() {
            let filePath = directory + "/" + name(seq, "open")
            let bytes = try QueueFiles.read(filePath) ?? []
            guard let lastLF = bytes.lastIndex(of: UInt8(ascii: "\n")) else {
                try QueueFiles.remove(filePath)
                continue
            }
            if lastLF + 1 < bytes.count { try QueueFiles.truncate(filePath, to: lastLF + 1) }
            let lines = bytes[...lastLF].split(separator: UInt8(ascii: "\n"))
            guard let header = try? Header(lines[0]) else {
                try QueueFiles.rename(filePath, to: directory + "/" + name(seq, "refused"))
                continue
            }
            guard lines.count > 1 else {
                // A header without a fix: nothing was taken into it.
                try QueueFiles.remove(filePath)
                continue
            }
            state.newestFixLine = String(decoding: lines[lines.count - 1], as: UTF8.self)
            if index < opens.count - 1 {
                try QueueFiles.rename(filePath, to: directory + "/" + name(seq, "batch"))
                state.sealed.append(seq)
                continue
            }
            let fd = try QueueFiles.openForAppend(filePath)
            state.open = OpenBatch(
                seq: seq, fd: fd, fixCount: lines.count - 1, createdAtMicros: header.createdAtMicros)
        }
        state.sealed.sort()
        return state
    }
}

extension String {
    fileprivate func replacingSuffix(_ suffix: String, with replacement: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) + replacement : self + replacement
    }
}
