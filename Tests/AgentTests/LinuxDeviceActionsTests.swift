import FindMyClient
import Foundation
import TestSupport
import Testing
import Threads

@testable import findmy_agent

/// The alarm and the lost message, with a `--sound-command` the test can watch: each play appends
/// its process id to a file.
@Suite struct LinuxDeviceActionsTests {
    final class Scratch {
        let directory = NSTemporaryDirectory() + "findmy-actions-\(UUID().uuidString.prefix(8))"
        let log = Locked<[String]>([])

        init() throws {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(atPath: directory) }

        var plays: String { directory + "/plays" }

        /// The process ids the sound command wrote, one line each.
        var playedPIDs: [pid_t] {
            ((try? String(contentsOfFile: plays, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                pid_t($0)
            }
        }

        /// Actions with `script` as the sound command (run by /bin/sh), no desktop session.
        func actions(_ script: String) -> LinuxDeviceActions {
            LinuxDeviceActions(
                soundCommand: ["/bin/sh", "-c", script], stateDirectory: directory, environment: [:],
                log: { [log] line in log.withLock { $0.append(line) } })
        }
    }

    /// Gone: no such process, or a zombie nobody reaped yet (which plays nothing).
    static func isGone(_ pid: pid_t) -> Bool {
        if kill(pid, 0) != 0 && errno == ESRCH { return true }
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        guard let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(close, offsetBy: 2)] == "Z"
    }

    @Test func theSoundPlaysAgainAndAgainUntilStopped() throws {
        let scratch = try Scratch()
        let actions = scratch.actions("echo $$ >> '\(scratch.plays)'")
        actions.startSound(commandID: "c1", limitSeconds: 600)
        #expect(actions.isPlaying)
        try waitUntil("the sound command run three times") { scratch.playedPIDs.count >= 3 }
        actions.stopSound()
        #expect(!actions.isPlaying)
        let played = scratch.playedPIDs
        #expect(Set(played).count == played.count, "each play is a process of its own")
        #expect(played.allSatisfy(Self.isGone))
        #expect(scratch.log.withLock { $0.contains { $0.contains("c1") && $0.contains("sound") } })
    }

    @Test func stoppingKillsWhatIsPlayingAndItsChildren() throws {
        let scratch = try Scratch()
        // The shell starts a player of its own and waits for it: both belong to the play.
        let actions = scratch.actions("sleep 600 & echo $! >> '\(scratch.plays)'; wait")
        actions.startSound(commandID: "c2", limitSeconds: 600)
        try waitUntil("the player started") { !scratch.playedPIDs.isEmpty }
        actions.stopSound()
        #expect(!actions.isPlaying)
        let player = scratch.playedPIDs[0]
        try waitUntil("the player killed") { Self.isGone(player) }
        #expect(scratch.playedPIDs.count == 1)
    }

    @Test func theLimitStopsTheSound() throws {
        let scratch = try Scratch()
        let actions = scratch.actions("echo $$ >> '\(scratch.plays)'; exec sleep 600")
        actions.startSound(commandID: "c3", limitSeconds: 0.3)
        try waitUntil("the sound stopped by its limit") { !actions.isPlaying }
        let played = scratch.playedPIDs
        #expect(played.count == 1)
        #expect(played.allSatisfy(Self.isGone))
        #expect(scratch.log.withLock { $0.contains { $0.contains("limit") } })
    }

    @Test func startingAgainWhilePlayingKeepsOneAlarm() throws {
        let scratch = try Scratch()
        let actions = scratch.actions("echo $$ >> '\(scratch.plays)'; exec sleep 600")
        actions.startSound(commandID: "c4", limitSeconds: 600)
        try waitUntil("the first play") { !scratch.playedPIDs.isEmpty }
        actions.startSound(commandID: "c5", limitSeconds: 600)
        actions.startSound(commandID: "c5", limitSeconds: 600)
        #expect(actions.isPlaying)
        actions.stopSound()
        #expect(scratch.playedPIDs.count == 1)
        // And it can be started again once stopped.
        actions.startSound(commandID: "c6", limitSeconds: 600)
        try waitUntil("the second alarm's play") { scratch.playedPIDs.count == 2 }
        actions.stopSound()
        #expect(scratch.playedPIDs.allSatisfy(Self.isGone))
    }

    @Test func stoppingWhenNothingPlaysDoesNothing() throws {
        let scratch = try Scratch()
        let actions = scratch.actions("echo $$ >> '\(scratch.plays)'")
        actions.stopSound()
        actions.stopSound()
        #expect(!actions.isPlaying)
        #expect(scratch.playedPIDs.isEmpty)
    }

    @Test func aFailingSoundCommandIsLoggedAndRetriedNotSpun() throws {
        let scratch = try Scratch()
        let actions = scratch.actions("echo $$ >> '\(scratch.plays)'; exit 3")
        actions.startSound(commandID: "c7", limitSeconds: 600)
        try waitUntil("two failed plays") { scratch.playedPIDs.count >= 2 }
        actions.stopSound()
        #expect(scratch.log.withLock { $0.contains { $0.contains("status 3") } })
    }

    @Test func theLostMessageGoesToTheLogWithTheNumberAndIsCleared() throws {
        let scratch = try Scratch()
        let actions = scratch.actions("true")
        actions.showLost(commandID: "l1", message: "Please return me: reward", phone: "+49 30 1234567")
        #expect(actions.lostMessage == "Please return me: reward")
        let lines = scratch.log.withLock { $0 }
        #expect(lines.contains { $0.contains("Please return me: reward") && $0.contains("+49 30 1234567") })
        actions.clearLost()
        #expect(actions.lostMessage == nil)
        #expect(scratch.log.withLock { $0.count } > lines.count)
    }
}

/// Which player sounds the alarm, for each machine: a decision table.
@Suite struct SoundPlayerChoiceTests {
    let tone = "/state/alarm.wav"
    let alarm = "/usr/share/sounds/freedesktop/stereo/alarm-clock-elapsed.oga"

    func audio(
        paplay: Bool = false, alarmFile: Bool = false, pulse: Bool = false, aplay: Bool = false,
        card: Bool = false
    ) -> AudioSystem {
        AudioSystem(
            paplay: paplay ? "/usr/bin/paplay" : nil, alarmSound: alarmFile ? alarm : nil,
            soundServerAnswers: pulse, aplay: aplay ? "/usr/bin/aplay" : nil, soundCardPresent: card)
    }

    @Test func theTable() {
        let everything = audio(paplay: true, alarmFile: true, pulse: true, aplay: true, card: true)
        #expect(
            SoundPlayer.choose(soundCommand: ["beep"], audio: everything, tonePath: tone)
                == .command(["beep"]))
        #expect(
            SoundPlayer.choose(soundCommand: nil, audio: everything, tonePath: tone)
                == .command(["/usr/bin/paplay", "--volume=65536", alarm]))
        // No sound server answering (a system service, nobody logged in): ALSA directly.
        let noServer = audio(paplay: true, alarmFile: true, pulse: false, aplay: true, card: true)
        #expect(
            SoundPlayer.choose(soundCommand: nil, audio: noServer, tonePath: tone)
                == .command(["/usr/bin/aplay", "-q", tone]))
        // paplay without Debian's alarm sound (sound-theme-freedesktop not installed).
        let noTheme = audio(paplay: true, alarmFile: false, pulse: true, aplay: true, card: true)
        #expect(
            SoundPlayer.choose(soundCommand: nil, audio: noTheme, tonePath: tone)
                == .command(["/usr/bin/aplay", "-q", tone]))
        // No sound card, or no aplay: the terminal bell.
        #expect(SoundPlayer.choose(soundCommand: nil, audio: audio(aplay: true), tonePath: tone) == .bell)
        #expect(SoundPlayer.choose(soundCommand: nil, audio: audio(card: true), tonePath: tone) == .bell)
        #expect(SoundPlayer.choose(soundCommand: nil, audio: audio(), tonePath: tone) == .bell)
        // An empty --sound-command is no command.
        #expect(SoundPlayer.choose(soundCommand: [], audio: audio(), tonePath: tone) == .bell)
    }

    @Test func theToneIsAWaveFileOfTheLengthItSays() {
        let bytes = AlarmTone.wav()
        func word(_ offset: Int) -> UInt32 {
            bytes[offset..<offset + 4].reversed().reduce(0) { $0 << 8 | UInt32($1) }
        }
        #expect(Array(bytes[0..<4]) == Array("RIFF".utf8))
        #expect(Array(bytes[8..<16]) == Array("WAVEfmt ".utf8))
        #expect(Int(word(4)) == bytes.count - 8)
        #expect(word(24) == UInt32(AlarmTone.sampleRate))
        #expect(Array(bytes[36..<40]) == Array("data".utf8))
        #expect(Int(word(40)) == bytes.count - 44)
        // Sound in it, not silence: some sample near full scale.
        let samples = stride(from: 44, to: bytes.count - 1, by: 2).map {
            Int16(bitPattern: UInt16(bytes[$0]) | UInt16(bytes[$0 + 1]) << 8)
        }
        #expect(samples.contains { $0 > 20_000 })
    }
}
