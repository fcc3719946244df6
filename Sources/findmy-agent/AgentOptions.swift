// The agent's command line (docs/agent.md): its commands, their options, and usage errors that say
// what to type instead.
#if canImport(Glibc)
    import Glibc
#endif

enum AgentCommand: Equatable {
    case enrol(EnrolOptions)
    case run(RunOptions)
    case stopSound(stateDirectory: String)
    case status(stateDirectory: String)
    case help(String)
}

struct EnrolOptions: Equatable {
    var stateDirectory: String
    var server: String?
    var userToken: String?
    var setupLink: String?
    var name: String
    var model = ""
}

enum FixSourceChoice: Equatable {
    case gpsd(host: String, port: Int)
    case fixed(latitude: Double, longitude: Double, accuracyMeters: Double)
}

struct RunOptions: Equatable {
    var stateDirectory: String
    var source: FixSourceChoice
    var intervalSeconds = 60.0
    var soundCommand: [String]?
    var soundSeconds = 120.0
    var batchFixes = 100
    var batchAgeSeconds = 60.0
}

struct UsageError: Error, Equatable, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

enum AgentUsage {
    static let summary = """
        usage: findmy-agent <command> [options]

        Reports this device's position to a findmy server and acts on its owner's commands
        (locate, play a sound, mark as lost, found). docs/agent.md has the whole story.

        commands:
          enrol       make this device known to the server, once
          run         report fixes and answer commands until stopped (the systemd unit runs this)
          stop-sound  stop an alarm the running agent plays
          status      what is enrolled, queued and running

        `findmy-agent <command> --help` shows a command's options.
        """

    static let enrol = """
        usage: findmy-agent enrol --server URL (--user-token T | --setup-link L) --name NAME [--state-dir DIR]

          --server URL        the findmy server, e.g. https://find.example (not needed with --setup-link)
          --user-token T      an API token of the device's owner (findmy user add prints it)
          --setup-link L      the findmy://setup?... link of the panel's Add a device, instead
          --name NAME         the device's name as its owner sees it
          --model MODEL       the device's model (optional)
          --state-dir DIR     where credentials.json (0600) and the queue live; default
                              $STATE_DIRECTORY (systemd), else ~/.local/state/findmy-agent
        """

    static let run = """
        usage: findmy-agent run [--state-dir DIR] (--gpsd HOST:PORT | --fixed LAT,LON[,ACCURACY]) [options]

          --gpsd HOST:PORT          fixes from gpsd (usually 127.0.0.1:2947)
          --fixed LAT,LON[,ACC]     a fixed position (a desktop), accuracy in metres (default 50)
          --interval-seconds N      a fixed position is reported every N seconds (default 60)
          --sound-command CMD...    what plays the alarm instead of paplay/aplay/the bell; every
                                    argument after it is part of the command
          --sound-seconds N         an alarm stops after N seconds at most (default 120)
          --batch-fixes N           fixes per batch, 1 to 10000 (default 100)
          --batch-age-seconds N     a batch is sent at most N seconds after its first fix (default 60)
          --state-dir DIR           as for enrol

        Logs one line per event on standard error. SIGTERM or Ctrl-C stops it (queued fixes stay
        queued); SIGUSR1 stops an alarm (findmy-agent stop-sound sends it).
        """

    static func stateOnly(_ command: String) -> String {
        """
        usage: findmy-agent \(command) [--state-dir DIR]

          --state-dir DIR     as for enrol
        """
    }
}

extension AgentCommand {
    /// Parses the arguments after the program's name.
    static func parse(_ arguments: [String], environment: [String: String]) throws(UsageError) -> AgentCommand
    {
        guard let command = arguments.first else { return .help(AgentUsage.summary) }
        var reader = ArgumentReader(Array(arguments.dropFirst()))
        if reader.contains("--help") || reader.contains("-h") {
            switch command {
            case "enrol", "enroll": return .help(AgentUsage.enrol)
            case "run": return .help(AgentUsage.run)
            case "stop-sound", "status": return .help(AgentUsage.stateOnly(command))
            default: return .help(AgentUsage.summary)
            }
        }
        switch command {
        case "help", "--help", "-h": return .help(AgentUsage.summary)
        case "enrol", "enroll": return .enrol(try parseEnrol(&reader, environment))
        case "run": return .run(try parseRun(&reader, environment))
        case "stop-sound":
            let directory = try stateDirectory(&reader, environment)
            try reader.finish(command)
            return .stopSound(stateDirectory: directory)
        case "status":
            let directory = try stateDirectory(&reader, environment)
            try reader.finish(command)
            return .status(stateDirectory: directory)
        default:
            throw UsageError(
                "unknown command '\(command)'; the commands are enrol, run, stop-sound and status")
        }
    }

    private static func parseEnrol(_ reader: inout ArgumentReader, _ environment: [String: String])
        throws(UsageError) -> EnrolOptions
    {
        let directory = try stateDirectory(&reader, environment)
        let server = try reader.value("--server")
        let userToken = try reader.value("--user-token")
        let setupLink = try reader.value("--setup-link")
        guard let name = try reader.value("--name") else {
            throw UsageError("enrol needs --name NAME: the device's name as its owner sees it")
        }
        let model = try reader.value("--model") ?? ""
        try reader.finish("enrol")
        switch (userToken, setupLink) {
        case (nil, nil):
            throw UsageError(
                "enrol needs --user-token T (an API token of the owner) or --setup-link L (from the panel)")
        case (.some, .some):
            throw UsageError("give --user-token or --setup-link, not both")
        case (.some, nil) where server == nil:
            throw UsageError("enrol with --user-token needs --server URL, e.g. --server https://find.example")
        default: break
        }
        if let server, !(server.hasPrefix("http://") || server.hasPrefix("https://")) {
            throw UsageError("--server must be a URL beginning with http:// or https://, got '\(server)'")
        }
        return EnrolOptions(
            stateDirectory: directory, server: server, userToken: userToken, setupLink: setupLink, name: name,
            model: model)
    }

    private static func parseRun(_ reader: inout ArgumentReader, _ environment: [String: String])
        throws(UsageError) -> RunOptions
    {
        let soundCommand = reader.remainder(after: "--sound-command")
        let directory = try stateDirectory(&reader, environment)
        let gpsd = try reader.value("--gpsd")
        let fixed = try reader.value("--fixed")
        var source: FixSourceChoice
        switch (gpsd, fixed) {
        case (let gpsd?, nil): source = try parseGPSD(gpsd)
        case (nil, let fixed?): source = try parseFixed(fixed)
        case (nil, nil): throw UsageError("run needs --gpsd HOST:PORT or --fixed LAT,LON[,ACCURACY]")
        default: throw UsageError("give --gpsd or --fixed, not both")
        }
        var options = RunOptions(stateDirectory: directory, source: source)
        options.soundCommand = soundCommand
        if soundCommand?.isEmpty == true { throw UsageError("--sound-command needs the command after it") }
        options.intervalSeconds = try reader.number("--interval-seconds", in: 1...86_400) ?? 60
        options.soundSeconds = try reader.number("--sound-seconds", in: 1...3600) ?? 120
        options.batchFixes = Int(try reader.number("--batch-fixes", in: 1...10_000) ?? 100)
        options.batchAgeSeconds = try reader.number("--batch-age-seconds", in: 0...86_400) ?? 60
        try reader.finish("run")
        return options
    }

    private static func parseGPSD(_ text: String) throws(UsageError) -> FixSourceChoice {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (1...65535).contains(port), colon != text.startIndex
        else { throw UsageError("--gpsd must be HOST:PORT, e.g. 127.0.0.1:2947, got '\(text)'") }
        return .gpsd(host: String(text[..<colon]), port: port)
    }

    private static func parseFixed(_ text: String) throws(UsageError) -> FixSourceChoice {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false).map { Double($0) }
        guard parts.count == 2 || parts.count == 3, let latitude = parts[0], let longitude = parts[1],
            (-90...90).contains(latitude), (-180...180).contains(longitude)
        else {
            throw UsageError(
                "--fixed must be LAT,LON[,ACCURACY] in degrees and metres, e.g. 52.52,13.405,30; got '\(text)'"
            )
        }
        let accuracy = parts.count == 3 ? parts[2] : 50
        guard let accuracy, accuracy >= 0.01, accuracy <= 1_000_000 else {
            throw UsageError("--fixed's accuracy must be within 0.01 to 1000000 metres, got '\(text)'")
        }
        return .fixed(latitude: latitude, longitude: longitude, accuracyMeters: accuracy)
    }

    private static func stateDirectory(_ reader: inout ArgumentReader, _ environment: [String: String])
        throws(UsageError) -> String
    {
        if let directory = try reader.value("--state-dir") { return directory }
        // systemd's StateDirectory= may name several, separated by colons: the first is ours.
        if let state = environment["STATE_DIRECTORY"], let first = state.split(separator: ":").first {
            return String(first)
        }
        guard let home = environment["HOME"], !home.isEmpty else {
            throw UsageError("no --state-dir, no $STATE_DIRECTORY and no $HOME: give --state-dir DIR")
        }
        return home + "/.local/state/findmy-agent"
    }
}

/// Options as `--name value` pairs, each at most once.
struct ArgumentReader {
    private var arguments: [String]

    init(_ arguments: [String]) { self.arguments = arguments }

    func contains(_ flag: String) -> Bool { arguments.contains(flag) }

    mutating func value(_ name: String) throws(UsageError) -> String? {
        guard let index = arguments.firstIndex(of: name) else { return nil }
        guard index + 1 < arguments.count else { throw UsageError("\(name) needs a value") }
        let value = arguments[index + 1]
        arguments.removeSubrange(index...(index + 1))
        guard !arguments.contains(name) else { throw UsageError("\(name) is given twice") }
        return value
    }

    mutating func number(_ name: String, in range: ClosedRange<Double>) throws(UsageError) -> Double? {
        guard let text = try value(name) else { return nil }
        guard let number = Double(text), range.contains(number) else {
            throw UsageError(
                "\(name) must be a number from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
        }
        return number
    }

    /// Everything after `name` (taken off), or nil when `name` is not there.
    mutating func remainder(after name: String) -> [String]? {
        guard let index = arguments.firstIndex(of: name) else { return nil }
        let rest = Array(arguments[(index + 1)...])
        arguments.removeSubrange(index...)
        return rest
    }

    func finish(_ command: String) throws(UsageError) {
        guard let extra = arguments.first else { return }
        throw UsageError("\(command) does not take '\(extra)'; see findmy-agent \(command) --help")
    }
}
