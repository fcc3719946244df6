import Foundation
import Testing

/// Package.swift declares what each target may import; a declared module nobody imports still
/// orders the build and links, and an undeclared one builds only while some other target happens
/// to build it first. So the manifest's dependencies must equal the imports, target by target.
@Suite struct ManifestTests {
    /// The package's root: this file is Tests/PackageTests/ManifestTests.swift.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    @Test func everyTargetDeclaresExactlyTheModulesOfThisPackageItImports() throws {
        let manifest = try String(contentsOfFile: Self.root + "/Package.swift", encoding: .utf8)
        let targets = ManifestTargets.parse(manifest)
        #expect(targets.count > 30, "Package.swift read as \(targets.count) targets")
        // A target's module is its name with `-` as `_` (the executable findmy-agent is findmy_agent).
        let modules = Set(targets.map { moduleName($0.name) })
        for target in targets where !target.isSystemLibrary {
            let imported = try Self.imports(under: Self.root + "/" + target.path)
                .intersection(modules).subtracting([moduleName(target.name)])
            let declared = Set(target.dependencies.map(moduleName))
            let undeclared = imported.subtracting(declared).sorted()
            let unused = declared.subtracting(imported).sorted()
            #expect(undeclared.isEmpty, "\(target.name) imports \(undeclared) without declaring them")
            #expect(unused.isEmpty, "\(target.name) declares \(unused) but imports none of them")
        }
    }

    /// The floors of docs/architecture.md: Core, the registry and its one append path, stands on the
    /// log alone (no HTTP, JSON or hashing), and Identity on Core and the leaves, never on a feature.
    @Test func theCoreAndIdentityStandOnTheirFloors() throws {
        let manifest = try String(contentsOfFile: Self.root + "/Package.swift", encoding: .utf8)
        let modules = Set(ManifestTargets.parse(manifest).map(\.name))
        let core = try Self.imports(under: Self.root + "/Sources/Core").intersection(modules)
        #expect(core.isSubset(of: ["Events", "Threads"]), "Core imports \(core.sorted())")
        let identity = try Self.imports(under: Self.root + "/Sources/Identity").intersection(modules)
        #expect(
            identity.isSubset(of: ["Core", "Events", "HTTP", "JSON", "Crypto", "Threads"]),
            "Identity imports \(identity.sorted())")
    }

    @Test func theReaderFindsNamesDependenciesAndPaths() {
        let targets = ManifestTargets.parse(
            """
            .systemLibrary(name: "CLZ4", pkgConfig: "liblz4", providers: [.apt(["liblz4-dev"])]),
            // .target(name: "Gone", dependencies: ["A"]),
            .target(name: "Events", dependencies: ["CLZ4", "Threads"], swiftSettings: strict),  // why
            .target(
                name: "Support", dependencies: ["Threads"], path: "Tests/Support",
                swiftSettings: strict),
            .testTarget(name: "EventsTests", dependencies: ["Events"]),
            .executableTarget(name: "tool"),
            """)
        #expect(
            targets == [
                ManifestTarget(name: "CLZ4", dependencies: [], path: "Sources/CLZ4", isSystemLibrary: true),
                ManifestTarget(name: "Events", dependencies: ["CLZ4", "Threads"], path: "Sources/Events"),
                ManifestTarget(name: "Support", dependencies: ["Threads"], path: "Tests/Support"),
                ManifestTarget(name: "EventsTests", dependencies: ["Events"], path: "Tests/EventsTests"),
                ManifestTarget(name: "tool", dependencies: [], path: "Sources/tool"),
            ])
    }

    @Test func theReaderFindsEveryFormOfImport() {
        // Lines rather than a multi-line literal, so that this file's own imports stay its own.
        let source = [
            "import Events",
            "@testable import Clients",
            "@_exported import TestSupport",
            "public import HTTP",
            "import struct Identity.APIError",
            "#if canImport(Glibc)",
            "    import Glibc",
            "#endif",
            "// import Commented",
            #"let text = "import Quoted""#,
            #"let block = """"#,
            "    import InAString",
            #"    """"#,
            "import Threads",
        ].joined(separator: "\n")
        #expect(
            ManifestTests.imports(in: source)
                == ["Events", "Clients", "TestSupport", "HTTP", "Identity", "Glibc", "Threads"])
    }

    /// The module a target builds: its name with each `-` as `_`.
    func moduleName(_ target: String) -> String { target.replacingOccurrences(of: "-", with: "_") }

    /// Every module a Swift file under `directory` imports.
    static func imports(under directory: String) throws -> Set<String> {
        var modules = Set<String>()
        guard let files = FileManager.default.enumerator(atPath: directory) else { return modules }
        for case let file as String in files where file.hasSuffix(".swift") {
            modules.formUnion(
                imports(in: try String(contentsOfFile: directory + "/" + file, encoding: .utf8)))
        }
        return modules
    }

    /// The modules of the `import` declarations of one Swift file, in order.
    static func imports(in source: String) -> [String] {
        let kinds: Set<Substring> = [
            "typealias", "struct", "class", "enum", "protocol", "let", "var", "func",
        ]
        var modules: [String] = []
        var inMultilineString = false
        for line in source.split(separator: "\n") {
            if line.components(separatedBy: "\"\"\"").count % 2 == 0 {
                inMultilineString.toggle()
                continue
            }
            if inMultilineString { continue }
            var words = line.split(separator: " ")[...]
            while let first = words.first,
                first.hasPrefix("@") || first == "public" || first == "package"
                    || first == "internal" || first == "private" || first == "fileprivate"
            {
                words = words.dropFirst()
            }
            guard words.first == "import", words.count >= 2 else { continue }
            words = words.dropFirst()
            if let kind = words.first, kinds.contains(kind), words.count >= 2 { words = words.dropFirst() }
            if let path = words.first, let module = path.split(separator: ".").first {
                modules.append(String(module))
            }
        }
        return modules
    }
}

/// One target of Package.swift as the manifest test reads it.
struct ManifestTarget: Equatable {
    var name: String
    var dependencies: [String]
    var path: String
    var isSystemLibrary = false
}

/// Reads the targets out of Package.swift's text, as it is written here: each target a call of
/// `.target`, `.testTarget`, `.executableTarget` or `.systemLibrary` with a literal `name:`, an
/// optional literal `dependencies:` array of names, and an optional literal `path:`.
enum ManifestTargets {
    static let kinds = [
        "target": "Sources", "executableTarget": "Sources", "testTarget": "Tests", "systemLibrary": "Sources",
    ]

    static func parse(_ manifest: String) -> [ManifestTarget] {
        let text = withoutComments(manifest)[...]
        var targets: [ManifestTarget] = []
        var rest = text
        while let dot = rest.firstIndex(of: ".") {
            let kindStart = rest.index(after: dot)
            let kindEnd = rest[kindStart...].firstIndex { !$0.isLetter } ?? rest.endIndex
            let kind = String(rest[kindStart..<kindEnd])
            guard let folder = kinds[kind], kindEnd < rest.endIndex, rest[kindEnd] == "(",
                let call = balanced(rest[kindEnd...]),
                let name = firstString(after: "name:", in: call)
            else {
                rest = rest[kindStart...]
                continue
            }
            rest = rest[call.endIndex...]
            targets.append(
                ManifestTarget(
                    name: name, dependencies: list(after: "dependencies:", in: call),
                    path: firstString(after: "path:", in: call) ?? folder + "/" + name,
                    isSystemLibrary: kind == "systemLibrary"))
        }
        return targets
    }

    /// The text with each `//` comment cut to its line's end (Package.swift puts no `//` in a string).
    static func withoutComments(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            guard let range = line.range(of: "//") else { return line }
            return line[..<range.lowerBound]
        }.joined(separator: "\n")
    }

    /// `text` from its opening parenthesis to the one that closes it.
    static func balanced(_ text: Substring) -> Substring? {
        var depth = 0
        for index in text.indices {
            switch text[index] {
            case "(", "[": depth += 1
            case ")", "]":
                depth -= 1
                if depth == 0 { return text[...index] }
            default: break
            }
        }
        return nil
    }

    static func firstString(after label: String, in call: Substring) -> String? {
        guard let range = call.range(of: label) else { return nil }
        return strings(in: call[range.upperBound...]).first
    }

    static func list(after label: String, in call: Substring) -> [String] {
        guard let range = call.range(of: label),
            let open = call[range.upperBound...].firstIndex(of: "["),
            let array = balanced(call[open...])
        else { return [] }
        return strings(in: array)
    }

    /// The string literals of `text`, in order.
    static func strings(in text: Substring) -> [String] {
        text.split(separator: "\"", omittingEmptySubsequences: false).enumerated()
            .filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }
}
