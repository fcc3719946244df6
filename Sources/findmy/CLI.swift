#if canImport(Glibc)
    import Glibc
#endif
import Events

/// A top-level command (`findmy log ...`, `findmy serve ...`).
struct Command: Sendable {
    var name: String
    var summary: String
    /// Receives the arguments after the command name; returns the exit status.
    var run: @Sendable ([String]) throws -> Int32
}

/// A usage error: printed with a hint to `--help`, exit status 2.
struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

func runMain(_ arguments: [String], commands: [Command]) -> Int32 {
    let rest = Array(arguments.dropFirst())
    guard let name = rest.first, name != "--help", name != "-h", name != "help" else {
        print(mainHelp(commands))
        return rest.isEmpty ? 2 : 0
    }
    guard let command = commands.first(where: { $0.name == name }) else {
        writeStandardError("findmy: unknown command '\(name)'. Run `findmy --help` for the list of commands.")
        return 2
    }
    do {
        return try command.run(Array(rest.dropFirst()))
    } catch let error as UsageError {
        writeStandardError("findmy \(name): \(error.description). Run `findmy \(name) --help` for usage.")
        return 2
    } catch {
        writeStandardError("findmy \(name): \(error)")
        return 1
    }
}

func mainHelp(_ commands: [Command]) -> String {
    var lines = [
        "findmy: a self-hosted \"find my device\" server.",
        "",
        "usage: findmy COMMAND [ARGUMENTS]",
        "",
        "commands:",
    ]
    for command in commands {
        lines.append("  " + command.name.padding(12) + command.summary)
    }
    lines.append("")
    lines.append("Run `findmy COMMAND --help` for a command's options. Documentation: docs/ in the source tree.")
    return lines.joined(separator: "\n")
}

extension String {
    func padding(_ width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}

/// `--name value`, `--name=value` and `--flag` options, with positional arguments kept in order.
struct Options {
    private var values: [String: String] = [:]
    private var flags: Set<String> = []
    private(set) var positional: [String] = []

    /// `valued` names the options that take a value; any other `--name` is a flag. Unknown options
    /// are a usage error, so that a typo never silently does something else.
    init(_ arguments: [String], valued: Set<String>, flags allowedFlags: Set<String>) throws {
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
            } else if allowedFlags.contains(name) || name == "help" {
                guard inlineValue == nil else { throw UsageError("--\(name) takes no value") }
                flags.insert(name)
            } else {
                throw UsageError("unknown option --\(name)")
            }
        }
    }

    func value(_ name: String) -> String? { values[name] }
    func flag(_ name: String) -> Bool { flags.contains(name) }

    /// A value from the option, else from the environment variable, else nil.
    func value(_ name: String, environment: String) -> String? {
        if let value = values[name] { return value }
        if let raw = getenv(environment) { return String(cString: raw) }
        return nil
    }

    func required(_ name: String, environment: String? = nil) throws -> String {
        let found = environment.map { value(name, environment: $0) } ?? value(name)
        guard let found, !found.isEmpty else {
            throw UsageError("--\(name) is required" + (environment.map { " (or set \($0))" } ?? ""))
        }
        return found
    }

    func integer(_ name: String, default fallback: Int) throws -> Int {
        guard let text = values[name] else { return fallback }
        guard let number = Int(text) else { throw UsageError("--\(name) must be a whole number, got '\(text)'") }
        return number
    }
}

/// Writes a line to standard output immediately (output may be piped to another process).
func printLine(_ line: String) {
    print(line)
    fflush(nil)
}
