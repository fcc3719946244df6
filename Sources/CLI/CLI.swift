import Events

// What the two executables share: `findmy` (the commands) and `findmy-bench` (the benchmark and
// load drivers) parse their arguments, report usage errors and dispatch the same way.
#if canImport(Glibc)
    import Glibc
#endif

/// A top-level command (`findmy log ...`, `findmy-bench ingest ...`).
public struct Command: Sendable {
    public var name: String
    public var summary: String
    /// False for a name kept only to say where its command went: `--help` does not list it.
    public var listed: Bool
    /// Receives the arguments after the command name; returns the exit status.
    public var run: @Sendable ([String]) throws -> Int32

    public init(
        name: String, summary: String, listed: Bool = true,
        run: @escaping @Sendable ([String]) throws -> Int32
    ) {
        self.name = name
        self.summary = summary
        self.listed = listed
        self.run = run
    }
}

/// A usage error: printed with a hint to `--help`, exit status 2.
public struct UsageError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Runs the command named by `arguments[1]`. `program` is the executable's name in messages,
/// `about` the first line of its `--help`.
public func runMain(_ arguments: [String], program: String, about: String, commands: [Command]) -> Int32 {
    let rest = Array(arguments.dropFirst())
    guard let name = rest.first, name != "--help", name != "-h", name != "help" else {
        print(mainHelp(program: program, about: about, commands))
        return rest.isEmpty ? 2 : 0
    }
    guard let command = commands.first(where: { $0.name == name }) else {
        writeStandardError(
            "\(program): unknown command '\(name)'. Run `\(program) --help` for the list of commands.")
        return 2
    }
    do {
        return try command.run(Array(rest.dropFirst()))
    } catch let error as UsageError {
        writeStandardError(
            "\(program) \(name): \(error.description). Run `\(program) \(name) --help` for usage.")
        return 2
    } catch {
        writeStandardError("\(program) \(name): \(error)")
        return 1
    }
}

func mainHelp(program: String, about: String, _ commands: [Command]) -> String {
    var lines = [
        about,
        "",
        "usage: \(program) COMMAND [ARGUMENTS]",
        "",
        "commands:",
    ]
    for command in commands where command.listed {
        lines.append("  " + command.name.padding(12) + command.summary)
    }
    lines.append("")
    lines.append(
        "Run `\(program) COMMAND --help` for a command's options. Documentation: docs/ in the source tree.")
    return lines.joined(separator: "\n")
}

extension String {
    public func padding(_ width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
/// `--name value`, `--name=value` and `--flag` options, with positional arguments kept in order.
public struct Options {
    private var values: [String: String] = [:]
    /// Every value of each option, in order, for the repeatable ones (`--user-map a=b --user-map c=d`).
    private var allValues: [String: [String]] = [:]
    private var flags: Set<String> = []
    public private(set) var positional: [String] = []

    /// `valued` names the options that take a value; any other `--name` is a flag. Unknown options
    /// are a usage error, so that a typo never silently does something else.
    public init(_ arguments: [String], valued: Set<String>, flags allowedFlags: Set<String>) throws {
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--") else {
                positional.append(argument)
                continue
            }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if valued.contains(name) {
                if let inlineValue {
                    values[name] = inlineValue
                } else {
                    guard index < arguments.count else { throw UsageError("--\(name) needs a value") }
                    values[name] = arguments[index]
                    index += 1
                }
                allValues[name, default: []].append(values[name]!)
            } else if allowedFlags.contains(name) || name == "help" {
                guard inlineValue == nil else { throw UsageError("--\(name) takes no value") }
                flags.insert(name)
            } else {
                throw UsageError("unknown option --\(name)")
            }
        }
    }

    /// The last value given for `name`.
    public func value(_ name: String) -> String? { values[name] }
    /// Every value given for `name`, in order (a repeatable option).
    public func values(_ name: String) -> [String] { allValues[name] ?? [] }
    public func flag(_ name: String) -> Bool { flags.contains(name) }

    /// A value from the option, else from the environment variable, else nil.
    public func value(_ name: String, environment: String) -> String? {
        if let value = values[name] { return value }
        if let raw = getenv(environment) { return String(cString: raw) }
        return nil
    }

    public func required(_ name: String, environment: String? = nil) throws -> String {
        let found = environment.map { value(name, environment: $0) } ?? value(name)
        guard let found, !found.isEmpty else {
            throw UsageError("--\(name) is required" + (environment.map { " (or set \($0))" } ?? ""))
        }
        return found
    }

    public func integer(_ name: String, default fallback: Int) throws -> Int {
        guard let text = values[name] else { return fallback }
        guard let number = Int(text) else {
            throw UsageError("--\(name) must be a whole number, got '\(text)'")
        }
        return number
    }
}

/// Writes a line to standard output immediately (output may be piped to another process).
public func printLine(_ line: String) {
    print(line)
    fflush(nil)
}
