// Which program sounds the alarm on this machine, and the tone ALSA plays: pure decisions and
// bytes, tested as tables; LinuxActions.swift runs what is chosen.
#if canImport(Glibc)
    import Glibc
#endif

/// What this machine can play sound with, looked up when an alarm starts (a desktop session and
/// its sound server come and go).
struct AudioSystem: Equatable {
    /// Debian's freedesktop alarm (package sound-theme-freedesktop).
    static let freedesktopAlarm = "/usr/share/sounds/freedesktop/stereo/alarm-clock-elapsed.oga"

    /// `paplay` (pulseaudio-utils), when installed: plays through PulseAudio or PipeWire's
    /// PulseAudio server.
    var paplay: String?
    /// The alarm sound file, when installed.
    var alarmSound: String?
    /// Whether a PulseAudio or PipeWire server accepts connections for this process.
    var soundServerAnswers: Bool
    /// `aplay` (alsa-utils), when installed: plays to the sound card directly.
    var aplay: String?
    /// Whether the kernel has a sound card (ALSA).
    var soundCardPresent: Bool

    /// This process's view: `environment` as its variables (PATH, XDG_RUNTIME_DIR, PULSE_SERVER).
    static func detect(environment: (String) -> String?) -> AudioSystem {
        AudioSystem(
            paplay: executable("paplay", environment: environment),
            alarmSound: access(freedesktopAlarm, R_OK) == 0 ? freedesktopAlarm : nil,
            soundServerAnswers: soundServerAnswers(environment: environment),
            aplay: executable("aplay", environment: environment),
            soundCardPresent: soundCardPresent())
    }

    /// A server named by PULSE_SERVER is taken at its word; otherwise the session's socket
    /// ($XDG_RUNTIME_DIR/pulse/native, which PipeWire's pipewire-pulse serves too) must accept a
    /// connection: a file left by a server that ended does not.
    static func soundServerAnswers(environment: (String) -> String?) -> Bool {
        if let server = environment("PULSE_SERVER"), !server.isEmpty { return true }
        guard let runtime = environment("XDG_RUNTIME_DIR"), !runtime.isEmpty else { return false }
        return unixSocketAnswers(runtime + "/pulse/native")
    }

    /// /proc/asound/cards lists the cards, or says "--- no soundcards ---"; it is absent without ALSA.
    static func soundCardPresent() -> Bool {
        guard let cards = SysfsBattery.read("/proc/asound/cards") else { return false }
        return !cards.isEmpty && !cards.hasPrefix("--- no soundcards")
    }

    /// The path of program `name` in PATH (Debian's default PATH when unset), when executable.
    static func executable(_ name: String, environment: (String) -> String?) -> String? {
        let path = environment("PATH").flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = directory + "/" + name
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    static func unixSocketAnswers(_ path: String) -> Bool {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
    }
}

/// How the alarm is sounded: a program run again and again, or the terminal bell.
enum SoundPlayer: Equatable, CustomStringConvertible {
    case command([String])
    case bell

    /// The decision, first that applies:
    ///
    /// | machine                                                  | player                        |
    /// | -------------------------------------------------------- | ----------------------------- |
    /// | `--sound-command` given (not empty)                      | that command                  |
    /// | paplay, the freedesktop alarm, a sound server answering  | `paplay --volume=65536 ALARM` |
    /// | aplay and a sound card                                   | `aplay -q TONE` (AlarmTone)   |
    /// | otherwise                                                | the terminal bell             |
    ///
    /// `--volume=65536` is the stream at 100 %; the output's own volume and mute are left as set.
    static func choose(soundCommand: [String]?, audio: AudioSystem, tonePath: String) -> SoundPlayer {
        if let soundCommand, !soundCommand.isEmpty { return .command(soundCommand) }
        if let paplay = audio.paplay, let alarm = audio.alarmSound, audio.soundServerAnswers {
            return .command([paplay, "--volume=65536", alarm])
        }
        if let aplay = audio.aplay, audio.soundCardPresent { return .command([aplay, "-q", tonePath]) }
        return .bell
    }

    var description: String {
        switch self {
        case .command(let argv): return argv.joined(separator: " ")
        case .bell: return "the terminal bell"
        }
    }
}

/// The alarm ALSA plays when there is no sound server: three short high beeps and a pause, as a
/// 16-bit mono PCM WAV file (RIFF), written into the state directory once.
enum AlarmTone {
    static let sampleRate = 22_050
    static let frequencyHertz = 1_760.0
    static let beepSeconds = 0.2
    static let gapSeconds = 0.1
    static let pauseSeconds = 0.5
    static let beeps = 3
    /// Of full scale: loud, with room so that resampling does not clip.
    static let amplitude = 0.9
    /// Each beep fades in and out over this long, so that it starts and ends without a click.
    static let fadeSeconds = 0.005

    static func samples() -> [Int16] {
        var samples: [Int16] = []
        let beepCount = Int(beepSeconds * Double(sampleRate))
        let fadeCount = Int(fadeSeconds * Double(sampleRate))
        for beep in 0..<beeps {
            for index in 0..<beepCount {
                let fade = min(1, Double(min(index, beepCount - 1 - index)) / Double(fadeCount))
                let phase = 2 * Double.pi * frequencyHertz * Double(index) / Double(sampleRate)
                samples.append(Int16(sin(phase) * amplitude * fade * Double(Int16.max)))
            }
            let silence = beep == beeps - 1 ? pauseSeconds : gapSeconds
            samples += repeatElement(0, count: Int(silence * Double(sampleRate)))
        }
        return samples
    }

    static func wav() -> [UInt8] {
        let data = samples().flatMap { sample -> [UInt8] in
            let bits = UInt16(bitPattern: sample)
            return [UInt8(bits & 0xff), UInt8(bits >> 8)]
        }
        var bytes: [UInt8] = []
        func word(_ value: Int) { bytes += (0..<4).map { UInt8((value >> ($0 * 8)) & 0xff) } }
        func half(_ value: Int) { bytes += [UInt8(value & 0xff), UInt8((value >> 8) & 0xff)] }
        bytes += Array("RIFF".utf8)
        word(36 + data.count)
        bytes += Array("WAVEfmt ".utf8)
        word(16)  // the fmt chunk's size
        half(1)  // PCM
        half(1)  // one channel
        word(sampleRate)
        word(sampleRate * 2)  // bytes per second
        half(2)  // bytes per frame
        half(16)  // bits per sample
        bytes += Array("data".utf8)
        word(data.count)
        return bytes + data
    }
}
