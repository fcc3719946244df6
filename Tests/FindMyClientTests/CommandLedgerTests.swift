import FindMyClient
import Testing

/// The ledger as transcripts: an event in, the actions out.
@Suite struct CommandLedgerTests {
    @Test func eachKindIsActedOnOnceWhateverTheChannel() {
        var ledger = CommandLedger()
        let locate = ClientCommand(commandID: "l1", kind: "locate")
        #expect(ledger.received(locate) == [.answerWithFreshFix(commandID: "l1")])
        #expect(ledger.received(locate) == [])
        #expect(
            ledger.received(ClientCommand(commandID: "s1", kind: "sound"))
                == [.startSound(commandID: "s1"), .answerWithNewestFix(commandID: "s1")])
        #expect(
            ledger.received(ClientCommand(commandID: "x1", kind: "lost", message: "call me", phone: "+49 1"))
                == [.showLost(commandID: "x1", message: "call me", phone: "+49 1")])
        #expect(ledger.received(ClientCommand(commandID: "x1", kind: "lost")) == [])
        #expect(
            ledger.received(ClientCommand(commandID: "f1", kind: "found"))
                == [.clearLost, .stopSound, .answerWithNewestFix(commandID: "f1")])
        #expect(ledger.received(ClientCommand(commandID: "z1", kind: "selfdestruct")) == [])
    }

    @Test func anAnsweredSoundGoesOnAndAnExpiredOneStops() {
        var ledger = CommandLedger()
        _ = ledger.received(ClientCommand(commandID: "s1", kind: "sound"))
        #expect(ledger.ended(commandID: "s1", state: "answered") == [])
        #expect(ledger.ended(commandID: "s1", state: "expired") == [.stopSound])
        #expect(ledger.ended(commandID: "s1", state: "expired") == [])
    }

    @Test func readyClearsALostThatClosedWhileAwayAndANewerLostReplacesTheOld() {
        var ledger = CommandLedger()
        _ = ledger.received(ClientCommand(commandID: "x1", kind: "lost", message: "a", phone: "1"))
        #expect(ledger.ready(open: ["x1"]) == [])
        _ = ledger.received(ClientCommand(commandID: "x2", kind: "lost", message: "b", phone: "2"))
        #expect(ledger.ended(commandID: "x1", state: "expired") == [])
        #expect(ledger.lost?.commandID == "x2")
        #expect(ledger.ready(open: []) == [.clearLost])
        #expect(ledger.lost == nil)
    }

    @Test func theIdsKeptAreBounded() {
        var ledger = CommandLedger()
        for index in 0..<(CommandLedger.actedOnMax + 10) {
            _ = ledger.received(ClientCommand(commandID: "c\(index)", kind: "locate"))
        }
        #expect(ledger.actedOn.count == CommandLedger.actedOnMax)
        #expect(ledger.actedOn.first == "c10")
    }
}
