import JSON
import Postgres
import Synchronization

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
            + 2 * JSONFlatObject.integerBytesMax
    }

    /// The device as the reader sees it at `nowMicros`: `sharedBy` is the owner's name for a device
    /// shared with the reader, nil for the reader's own.
    func write(_ writer: inout JSONWriter, nowMicros: Int64, sharedBy: String?) {
        var sharedBy = sharedBy
        sharedBy.withUTF8Optional { sharedByUTF8 in
            bytes.withUnsafeBufferPointer { card in
                writer.flatValue(bytesMax: bytesMax(sharedByUTF8Count: sharedByUTF8?.count ?? 0)) { object in
                    object.raw(UnsafeBufferPointer(rebasing: card[..<sharedByAt]))
                    if let sharedByUTF8 { object.string(utf8: sharedByUTF8) } else { object.null() }
                    object.raw(UnsafeBufferPointer(rebasing: card[sharedByAt..<sinceLastReportAt]))
                    Self.writeSeconds(&object, lastSeenMicros.map { nowMicros - $0 })
                    object.raw(UnsafeBufferPointer(rebasing: card[sinceLastReportAt..<fixAgeAt]))
                    Self.writeSeconds(&object, recordedAtMicros.map { nowMicros - $0 })
                    object.raw(UnsafeBufferPointer(rebasing: card[fixAgeAt...]))
                }
            }
        }
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
