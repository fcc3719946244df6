// What the device does about commands, as a pure value: events in (a command seen in a report
// answer or on the stream, the stream's `ready` and `ended`), actions out. The client performs the
// actions; the ledger is saved so that a restart acts on no command twice.
//
// | event                     | actions                                                        |
// | ------------------------- | -------------------------------------------------------------- |
// | command seen before       | none (a report answer and the stream, or a resume, repeat it)  |
// | locate                    | answer with a fresh fix                                        |
// | sound                     | start the sound; answer with the newest fix                    |
// | lost                      | show lost (replacing an earlier lost); never answered          |
// | found                     | clear lost, stop the sound; answer with the newest fix         |
// | unknown kind              | none (a newer server's command; not answered)                  |
// | ended expired: sounding   | stop the sound                                                 |
// | ended: the lost one shown | clear lost                                                     |
// | ready without the lost one shown | clear lost                                              |
//
// A sound is answered at once (so that the owner sees it taken and it is not handed out again),
// which closes it as `answered`: so an `ended` that says `answered` is our own answer and the alarm
// goes on, and `ready` cannot tell an answered sound from an expired one and leaves the alarm to its
// limit. A lost is never answered, so its absence from `ready` means a found or a newer lost.

/// Something the client must do.
public enum CommandAction: Sendable, Equatable {
    case answerWithFreshFix(commandID: String)
    case answerWithNewestFix(commandID: String)
    case startSound(commandID: String)
    case stopSound
    case showLost(commandID: String, message: String, phone: String)
    case clearLost
}

public struct CommandLedger: Sendable, Equatable {
    /// At most this many command ids are remembered as acted on; older ones are long closed.
    public static let actedOnMax = 512

    /// Ids of the commands acted on, oldest first.
    public private(set) var actedOn: [String] = []
    /// The stream's last event id (sent as `Last-Event-ID` on reconnection).
    public var lastEventID: String?
    /// The sound command whose alarm may be playing.
    public private(set) var sounding: String?
    /// The lost command shown, with what it shows (shown again after a restart).
    public private(set) var lost: ClientCommand?

    public init() {}

    init(actedOn: [String], lastEventID: String?, sounding: String?, lost: ClientCommand?) {
        self.actedOn = actedOn
        self.lastEventID = lastEventID
        self.sounding = sounding
        self.lost = lost
    }

    /// A command from a report answer or the stream.
    public mutating func received(_ command: ClientCommand) -> [CommandAction] {
        guard !actedOn.contains(command.commandID) else { return [] }
        actedOn.append(command.commandID)
        if actedOn.count > Self.actedOnMax { actedOn.removeFirst(actedOn.count - Self.actedOnMax) }
        let id = command.commandID
        switch command.kind {
        case "locate":
            return [.answerWithFreshFix(commandID: id)]
        case "sound":
            sounding = id
            return [.startSound(commandID: id), .answerWithNewestFix(commandID: id)]
        case "lost":
            lost = command
            return [.showLost(commandID: id, message: command.message ?? "", phone: command.phone ?? "")]
        case "found":
            var actions: [CommandAction] = []
            if lost != nil { actions.append(.clearLost) }
            if sounding != nil { actions.append(.stopSound) }
            lost = nil
            sounding = nil
            return actions + [.answerWithNewestFix(commandID: id)]
        default:
            return []
        }
    }

    /// The stream's `ended`: a command closed, `state` `answered` or `expired`.
    public mutating func ended(commandID: String, state: String) -> [CommandAction] {
        var actions: [CommandAction] = []
        if sounding == commandID && state != "answered" {
            sounding = nil
            actions.append(.stopSound)
        }
        if lost?.commandID == commandID {
            lost = nil
            actions.append(.clearLost)
        }
        return actions
    }

    /// The stream's `ready`: the device's open commands. A lost shown for a command no longer open is
    /// cleared (it closed while the stream was away).
    public mutating func ready(open: [String]) -> [CommandAction] {
        guard let lost, !open.contains(lost.commandID) else { return [] }
        return ended(commandID: lost.commandID, state: "expired")
    }

    /// The sound was stopped on the device (its limit, or a person).
    public mutating func soundStopped() {
        sounding = nil
    }
}
