import Core
import Identity
import JSON
import Presence
import Testing

@testable import ReadAPI

/// The devices list's kept JSON (`DeviceCard`, `DeviceCardCache`), without a server.
@Suite struct DeviceCardTests {
    /// A card as `ReadService.makeCard` cuts it: holes after `shared_by`, and the two staleness keys.
    func card(id: Int, lastSeen: Int64?, recordedAt: Int64?, version: Int64 = 1) -> DeviceCard {
        let head = Array(#"{"id":\#(id),"shared_by":"#.utf8)
        let middle = Array(#","last_seen_at":null,"since_last_report_seconds":"#.utf8)
        let fixAge = Array(#","fix_age_seconds":"#.utf8)
        let tail = Array(#","latest":null}"#.utf8)
        return DeviceCard(
            version: DeviceVersion(asOfOffset: version, latestOffset: -1, latestFixIndex: 0),
            bytes: head + middle + fixAge + tail, sharedByAt: head.count,
            sinceLastReportAt: head.count + middle.count,
            fixAgeAt: head.count + middle.count + fixAge.count, lastSeenMicros: lastSeen,
            recordedAtMicros: recordedAt)
    }

    func written(_ cards: [DeviceCard], nowMicros: Int64, sharedBy: String?) -> String {
        var writer = JSONWriter(capacity: 16)
        writer.beginArray()
        for card in cards { card.write(&writer, nowMicros: nowMicros, sharedBy: sharedBy) }
        writer.endArray()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    @Test func holesAreFilledForTheReaderAndTheMoment() {
        let card = card(id: 7, lastSeen: 1_000_000, recordedAt: 4_500_000)
        #expect(
            written([card], nowMicros: 10_000_000, sharedBy: nil)
                == #"[{"id":7,"shared_by":null,"last_seen_at":null,"since_last_report_seconds":9,"fix_age_seconds":5,"latest":null,"presence":null}]"#
        )
        // Another reader, later, the same card; a time ahead of the clock rounds down.
        #expect(
            written([card, card], nowMicros: 4_000_000, sharedBy: "Zoë \"Z\"")
                == #"[{"id":7,"shared_by":"Zoë \"Z\"","last_seen_at":null,"since_last_report_seconds":3,"fix_age_seconds":-1,"latest":null,"presence":null},"#
                + #"{"id":7,"shared_by":"Zoë \"Z\"","last_seen_at":null,"since_last_report_seconds":3,"fix_age_seconds":-1,"latest":null,"presence":null}]"#
        )
        let never = self.card(id: 8, lastSeen: nil, recordedAt: nil)
        #expect(
            written([never], nowMicros: 4_000_000, sharedBy: nil)
                == #"[{"id":8,"shared_by":null,"last_seen_at":null,"since_last_report_seconds":null,"fix_age_seconds":null,"latest":null,"presence":null}]"#
        )
    }

    @Test func theCacheKeepsWithinItsBudget() {
        let cost = card(id: 10, lastSeen: nil, recordedAt: nil).cost
        let cache = DeviceCardCache(bytesMax: cost * 10)
        var inserted: [UInt64: DeviceCard] = [:]
        for batch in 0..<6 {
            let cards = (0..<5).map { index in
                let id = UInt64(batch * 5 + index)
                return (
                    id: id, card: card(id: Int(id), lastSeen: nil, recordedAt: nil, version: Int64(batch))
                )
            }
            cache.insert(cards)
            for (id, card) in cards { inserted[id] = card }
            #expect(cache.usage.bytes <= cost * 10)
        }
        let ids = Array(UInt64(0)..<30)
        let kept = cache.cards(ids)
        #expect(kept.count == ids.count)
        var found: [UInt64: DeviceCard] = [:]
        for (id, card) in zip(ids, kept) { found[id] = card }
        #expect(!found.isEmpty && found.count == cache.usage.cards)
        #expect(cache.usage.bytes == found.values.reduce(0) { $0 + $1.cost })
        for (id, card) in found { #expect(card === inserted[id]) }
        // Replacing a card does not count it twice.
        let before = cache.usage
        if let (id, _) = found.first {
            cache.insert([(id, card(id: Int(id), lastSeen: 5, recordedAt: nil, version: 99))])
            #expect(cache.usage.cards == before.cards && cache.usage.bytes == before.bytes)
            #expect(cache.cards([id])[0]?.version.asOfOffset == 99)
        }
    }

    @Test func aCacheWithoutBudgetKeepsNothing() {
        let cache = DeviceCardCache(bytesMax: 0)
        cache.insert([(1, card(id: 1, lastSeen: nil, recordedAt: nil))])
        #expect(cache.cards([1]).compactMap { $0 }.isEmpty && cache.usage.cards == 0)
    }
}

/// The device JSON's `presence` member is written in place by the card and by `PresenceView.write`
/// for the presence API: the same bytes.
@Suite struct DeviceCardPresenceTests {
    @Test func theCardWritesPresenceAsPresenceViewDoes() throws {
        let head = Array(#"{"id":3,"shared_by":"#.utf8)
        let middle = Array(#","last_seen_at":null,"since_last_report_seconds":"#.utf8)
        let fixAge = Array(#","fix_age_seconds":"#.utf8)
        let tail = Array(#","latest":null}"#.utf8)
        let card = DeviceCard(
            version: DeviceVersion(asOfOffset: 1, latestOffset: -1, latestFixIndex: 0),
            bytes: head + middle + fixAge + tail, sharedByAt: head.count,
            sinceLastReportAt: head.count + middle.count, fixAgeAt: head.count + middle.count + fixAge.count,
            lastSeenMicros: nil, recordedAtMicros: nil)
        for view in [
            nil, PresenceView(online: true, atMicros: 1_764_684_400_123_456, nodeName: "n"),
            PresenceView(online: false, atMicros: nil, nodeName: "n"),
            PresenceView(online: false, atMicros: Int64.max, nodeName: "n"),
        ] as [PresenceView?] {
            var writer = JSONWriter(capacity: 16)
            card.write(&writer, nowMicros: 0, sharedBy: nil, presence: view)
            var expected = JSONWriter(capacity: 16)
            PresenceView.write(&expected, view)
            let text = String(decoding: writer.bytes, as: UTF8.self)
            #expect(
                text.hasSuffix(
                    #","latest":null,"presence":"# + String(decoding: expected.bytes, as: UTF8.self) + "}"))
            #expect((try? JSONParser.parse(writer.bytes)) != nil, "\(text)")
        }
    }
}
