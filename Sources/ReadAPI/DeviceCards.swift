import Core
import Identity
import JSON
import Postgres
import Synchronization
import Threads

/// Which state of a device a `DeviceCard` shows: the `devices` row's `as_of_offset` and the key of
/// its latest fix. A row's stamp moves whenever the projector writes it, and a latest fix's key
/// names one immutable fix of the log, so two equal versions of one device id show equal JSON, in
/// this generation of the projection or a rebuilt one (Schema.createGeneration).
struct DeviceVersion: Hashable, Sendable {
    var asOfOffset: Int64
    /// -1 for a device without a latest fix.
    var latestOffset: Int64
    var latestFixIndex: Int64

    init(asOfOffset: Int64, latestOffset: Int64, latestFixIndex: Int64) {
        self.asOfOffset = asOfOffset
        self.latestOffset = latestOffset
        self.latestFixIndex = latestFixIndex
    }

    /// From the version columns `first ..< first + 3` of a binary result (`ReadService.versionColumns`).
    init(_ result: PostgresResult, _ row: Int, _ first: Int) throws(PostgresError) {
        asOfOffset = try result.binaryInt64(row, first) ?? 0
        latestOffset = try result.binaryInt64(row, first + 1) ?? -1
        latestFixIndex = try result.binaryInt64(row, first + 2) ?? 0
    }
}

/// A device of the read API as JSON, written once from its row and kept, with holes for what
/// depends on the reader and the moment: `shared_by` and the two staleness numbers. Writing a
/// device is mostly formatting doubles and times; filling the holes is copying bytes.
final class DeviceCard: Sendable {
    let version: DeviceVersion
    /// The object without the holes' values: the first hole follows `"shared_by":`.
    let bytes: [UInt8]
    let sharedByAt: Int
    let sinceLastReportAt: Int
    let fixAgeAt: Int
    let lastSeenMicros: Int64?
    let recordedAtMicros: Int64?

    init(
        version: DeviceVersion, bytes: [UInt8], sharedByAt: Int, sinceLastReportAt: Int, fixAgeAt: Int,
        lastSeenMicros: Int64?, recordedAtMicros: Int64?
    ) {
        self.version = version
        self.bytes = bytes
        self.sharedByAt = sharedByAt
        self.sinceLastReportAt = sinceLastReportAt
        self.fixAgeAt = fixAgeAt
        self.lastSeenMicros = lastSeenMicros
        self.recordedAtMicros = recordedAtMicros
    }

    /// What the card costs the cache: its bytes and the object around them.
    var cost: Int { bytes.count + 128 }

    /// The most bytes `write` writes.
    func bytesMax(sharedByUTF8Count: Int) -> Int {
        bytes.count + JSONFlatObject.stringBytesMax(utf8Count: sharedByUTF8Count)
            + 2 * JSONFlatObject.integerBytesMax + Self.presenceBytesMax
    }

    /// The device as the reader sees it at `nowMicros`: `sharedBy` is the owner's name for a device
    /// shared with the reader, nil for the reader's own. `presence` is the tailnet's word on it
    /// (docs/presence.md), from the live registry rather than the card: it changes with the clock.
    func write(_ writer: inout JSONWriter, nowMicros: Int64, sharedBy: String?, presence: PresenceView? = nil)
    {
        var sharedBy = sharedBy
        precondition(bytes.last == UInt8(ascii: "}"))
        sharedBy.withUTF8Optional { sharedByUTF8 in
            bytes.withUnsafeBufferPointer { card in
                let bytesMax = bytesMax(sharedByUTF8Count: sharedByUTF8?.count ?? 0)
                writer.flatValue(bytesMax: bytesMax) { object in
                    object.raw(UnsafeBufferPointer(rebasing: card[..<sharedByAt]))
                    if let sharedByUTF8 { object.string(utf8: sharedByUTF8) } else { object.null() }
                    object.raw(UnsafeBufferPointer(rebasing: card[sharedByAt..<sinceLastReportAt]))
                    Self.writeSeconds(&object, lastSeenMicros.map { nowMicros - $0 })
                    object.raw(UnsafeBufferPointer(rebasing: card[sinceLastReportAt..<fixAgeAt]))
                    Self.writeSeconds(&object, recordedAtMicros.map { nowMicros - $0 })
                    // `,"presence":...` goes before the card's closing brace.
                    object.raw(UnsafeBufferPointer(rebasing: card[fixAgeAt..<(card.count - 1)]))
                    Self.writePresence(&object, presence)
                }
            }
        }
    }

    /// The most bytes `writePresence` writes.
    static let presenceBytesMax = 64 + JSONFlatObject.timestampBytesMax

    /// `,"presence":` and `PresenceView.write`'s object (the same bytes; DeviceCardTests compares
    /// them), then the card's closing brace. Written in place: a list of a thousand linked devices
    /// would otherwise build a thousand small arrays.
    static func writePresence(_ object: inout JSONFlatObject, _ presence: PresenceView?) {
        guard let presence else {
            return (#","presence":null}"# as StaticString).withUTF8Buffer { object.raw($0) }
        }
        (#","presence":{"source":"headscale","online":"# as StaticString).withUTF8Buffer { object.raw($0) }
        object.bool(presence.online)
        (#","last_seen":"# as StaticString).withUTF8Buffer { object.raw($0) }
        if let at = presence.atMicros {
            object.timestamp(micros: RFC3339.clampedMicros(at))
        } else {
            object.null()
        }
        ("}}" as StaticString).withUTF8Buffer { object.raw($0) }
    }

    /// Whole seconds, rounded down; negative when the time is ahead of the server's clock.
    static func writeSeconds(_ object: inout JSONFlatObject, _ micros: Int64?) {
        guard let micros else { return object.null() }
        object.int64(micros >= 0 ? micros / 1_000_000 : (micros + 1) / 1_000_000 - 1)
    }
}

/// The cards of recently read devices, by device id, within a budget of bytes. Shared by every
/// reader: a card holds nothing of who reads it.
///
/// A card is only ever used when the version PostgreSQL has now is the card's, so the cache
/// cannot answer with a state the projection has left. When an insert goes over the budget,
/// arbitrary cards go until a quarter of the budget is free.
final class DeviceCardCache: Sendable {
    let bytesMax: Int
    private let state = Mutex(State())

    private struct State {
        var cards: [UInt64: DeviceCard] = [:]
        var bytes = 0
        var reused = 0
        var written = 0
    }

    init(bytesMax: Int) { self.bytesMax = bytesMax }

    /// The kept card of each of `deviceIDs` (whatever its version), or nil: in the same order.
    func cards(_ deviceIDs: [UInt64]) -> [DeviceCard?] {
        guard bytesMax > 0 else { return Array(repeating: nil, count: deviceIDs.count) }
        return state.withLock { state in deviceIDs.map { state.cards[$0] } }
    }

    func insert(_ cards: [(id: UInt64, card: DeviceCard)]) {
        guard bytesMax > 0, !cards.isEmpty else { return }
        state.withLock { state in
            for (id, card) in cards where card.cost <= bytesMax {
                if let old = state.cards.updateValue(card, forKey: id) { state.bytes -= old.cost }
                state.bytes += card.cost
            }
            guard state.bytes > bytesMax else { return }
            var evicted: [UInt64] = []
            var bytes = state.bytes
            for (id, card) in state.cards {
                guard bytes > bytesMax - bytesMax / 4 else { break }
                evicted.append(id)
                bytes -= card.cost
            }
            for id in evicted { state.cards[id] = nil }
            state.bytes = bytes
        }
    }

    /// Counts, for `/metrics`, the devices of one list: kept cards used as they were, and cards
    /// written (new, or of a changed device).
    func count(reused: Int, written: Int) {
        state.withLock {
            $0.reused += reused
            $0.written += written
        }
    }

    /// Cards held and their cost, for tests and metrics.
    var usage: (cards: Int, bytes: Int) { state.withLock { ($0.cards.count, $0.bytes) } }

    /// Since the start: devices of lists answered from a kept card, and written anew.
    var counts: (reused: Int, written: Int) { state.withLock { ($0.reused, $0.written) } }
}

// MARK: rows to cards

extension ReadService {
    /// The rows of `result` (device id in column 0, as in every device statement) whose devices are in `scope`, by id. The
    /// statements leave the order to PostgreSQL (a sort there cost more than here), and the registry
    /// is ahead of the projection: a device removed a moment ago may still have a row.
    func rowsInScope(_ result: PostgresResult, _ scope: ReadAccess.ReadScope) throws(PostgresError) -> [(
        id: UInt64, row: Int
    )] {
        var rows: [(id: UInt64, row: Int)] = []
        rows.reserveCapacity(result.rowCount)
        for row in 0..<result.rowCount {
            let id = UInt64(bitPattern: try result.binaryInt64(row, 0) ?? 0)
            if scope.contains(id) { rows.append((id, row)) }
        }
        rows.sort { $0.id < $1.id }
        return rows
    }

    /// The cards of the rows of `result` (`deviceSelect`) whose devices are in `scope`, by id.
    /// Many are written in two halves at once, on this thread and one more: by then PostgreSQL has
    /// answered and the client waits, so the second core is free, and writing is most of the time.
    func makeCards(_ result: PostgresResult, _ scope: ReadAccess.ReadScope) throws(APIError) -> [(
        id: UInt64, card: DeviceCard
    )] {
        let rows = try decoding { () throws(PostgresError) in try rowsInScope(result, scope) }
        let halves = rows.count >= Self.parallelCardsMin ? 2 : 1
        let parts = (0..<halves).map { _ in CardsPart() }
        concurrentPerform(iterations: halves) { half in
            let part = parts[half]
            let slice = rows[(rows.count * half / halves)..<(rows.count * (half + 1) / halves)]
            part.cards.reserveCapacity(slice.count)
            var scratch = JSONWriter(capacity: 4096)
            do throws(PostgresError) {
                for (id, row) in slice {
                    part.cards.append((id, try makeCard(result, row, scratch: &scratch)))
                }
            } catch {
                part.failure = error
            }
        }
        var cards: [(id: UInt64, card: DeviceCard)] = []
        cards.reserveCapacity(rows.count)
        for part in parts {
            if let failure = part.failure { try decoding { () throws(PostgresError) in throw failure } }
            cards += part.cards
        }
        return cards
    }

    /// At least this many cards are written in two halves at once.
    static let parallelCardsMin = 256

    /// One half of the cards being written; touched by one thread at a time.
    final class CardsPart: @unchecked Sendable {
        var cards: [(id: UInt64, card: DeviceCard)] = []
        var failure: PostgresError?
    }

    /// The card of a device of a binary-format result (`deviceSelect`) and its latest fix.
    ///
    /// Each row is read whole, then written as one `JSONFlatObject` (one reservation per device
    /// instead of one per token), as `writeFix` does for a history page.
    /// `scratch` is where it is written before being copied out at its exact length.
    func makeCard(_ result: PostgresResult, _ row: Int, scratch writer: inout JSONWriter)
        throws(PostgresError)
        -> DeviceCard
    {
        typealias Column = DeviceColumn
        let id = try result.binaryInt64(row, Column.id.rawValue) ?? 0
        let name = try result.binaryText(row, Column.name.rawValue)
        let platform = try result.binaryText(row, Column.platform.rawValue)
        let model = try result.binaryText(row, Column.model.rawValue)
        let paused = try result.binaryBool(row, Column.paused.rawValue) ?? false
        let createdAt = try result.binaryTimestampMicros(row, Column.createdAt.rawValue)
        let lastSeen = try result.binaryTimestampMicros(row, Column.lastSeenAt.rawValue)
        let fixColumn = DeviceColumn.allCases.count
        // A device without a latest fix has nulls in every fix column (the LEFT JOIN).
        let latest: FixRow? =
            try result.binaryTimestampMicros(row, fixColumn + FixColumns.recordedAt) == nil
            ? nil : try FixRow(result, row, fixColumn)
        let version = try DeviceVersion(result, row, fixColumn + FixColumns.shown.count)
        let bytesMax =
            Self.deviceBytesMaxFixed + JSONFlatObject.stringBytesMax(utf8Count: name.count)
            + JSONFlatObject.stringBytesMax(utf8Count: platform.count)
            + JSONFlatObject.stringBytesMax(utf8Count: model.count) + (latest?.bytesMax ?? 0)
        writer.reset()
        var holes = (sharedBy: 0, sinceLastReport: 0, fixAge: 0)
        writer.flatObject(bytesMax: bytesMax) { object in
            object.key("id")
            object.int64(id)
            object.key("name")
            object.string(utf8: name)
            object.key("platform")
            object.string(utf8: platform)
            object.key("model")
            object.string(utf8: model)
            object.key("paused")
            object.bool(paused)
            object.key("shared_by")
            holes.sharedBy = object.written
            object.key("created_at")
            Self.writeTime(&object, createdAt)
            object.key("last_seen_at")
            Self.writeTime(&object, lastSeen)
            object.key("since_last_report_seconds")
            holes.sinceLastReport = object.written
            object.key("fix_age_seconds")
            holes.fixAge = object.written
            object.key("latest")
            if let latest {
                object.beginObject()
                latest.write(&object)
                object.endObject()
            } else {
                object.null()
            }
        }
        let bytes = writer.bytes.withUnsafeBufferPointer { written in
            [UInt8](unsafeUninitializedCapacity: written.count) { output, count in
                count = output.initialize(fromContentsOf: written)
            }
        }
        return DeviceCard(
            version: version, bytes: bytes, sharedByAt: holes.sharedBy,
            sinceLastReportAt: holes.sinceLastReport, fixAgeAt: holes.fixAge, lastSeenMicros: lastSeen,
            recordedAtMicros: latest?.recordedAt)
    }

    /// The keys, punctuation and fixed-width values of a device, for `makeCard`'s bound.
    static let deviceBytesMaxFixed = 512
}
