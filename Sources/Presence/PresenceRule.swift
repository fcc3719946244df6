import Core
import Events
import Identity

/// THE rule of what a poll records (docs/presence.md, "Only changes"): a pure function of the last
/// state the log holds for a linked device and what headscale says now.
///
/// | last recorded | headscale now | recorded |
/// | --- | --- | --- |
/// | none (just linked, or erased) | online | online, at the poll |
/// | none | offline | offline, last seen `lastSeen` |
/// | offline | online | online, at the poll |
/// | online | offline | offline, last seen `lastSeen` |
/// | offline, last seen T | offline, last seen T' later than T | offline, last seen T' (it was online between two polls) |
/// | online | online | nothing |
/// | offline, last seen T | offline, last seen T or earlier, or none | nothing |
///
/// So a node that stays as it is records nothing however often it is polled, and a restarted
/// server, whose registry folds the same log, records nothing it recorded before.
public enum PresenceRule {
    public static func change(
        deviceID: UInt64, link: PresenceBook.Link, last: PresenceBook.State?, observed: HeadscaleNode,
        nowMicros: Int64
    ) -> PresenceChanged? {
        guard observed.id == link.nodeID else { return nil }
        let event = PresenceChanged(
            deviceID: deviceID, nodeID: link.nodeID, online: observed.online,
            lastSeenMicros: observed.lastSeenMicros, observedAtMicros: nowMicros)
        guard let last else { return event }
        switch (last.online, observed.online) {
        case (false, true), (true, false):
            return event
        case (true, true):
            return nil
        case (false, false):
            guard let seen = observed.lastSeenMicros else { return nil }
            return seen > (last.lastSeenMicros ?? .min) ? event : nil
        }
    }
}
