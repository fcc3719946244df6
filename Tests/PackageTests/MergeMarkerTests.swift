import Foundation
import Testing

/// A merge resolved by hand can leave its conflict markers in a file that nothing compiles (a page
/// of docs/, the README, a script): the user's manual then shows two versions of one paragraph.
@Suite struct MergeMarkerTests {
    @Test func noFileOfTheRepositoryHoldsConflictMarkers() throws {
        let root = ManifestTests.root
        var found: [String] = []
        for directory in ["docs", "Sources", "Tests", "ops", "Fixtures", ".ci"] {
            guard let files = FileManager.default.enumerator(atPath: root + "/" + directory) else { continue }
            for case let file as String in files
            where [".md", ".swift", ".sh", ".py", ".js", ".css", ".service", ".lua"].contains(
                where: file.hasSuffix)
            {
                let path = directory + "/" + file
                guard let text = try? String(contentsOfFile: root + "/" + path, encoding: .utf8) else {
                    continue
                }
                for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false)
                    .enumerated()
                where line.hasPrefix("<<<<<<< ") || line.hasPrefix(">>>>>>> ") {
                    found.append("\(path):\(number + 1)")
                }
            }
        }
        for file in ["README.md", "Makefile", "Package.swift"] {
            let text = try String(contentsOfFile: root + "/" + file, encoding: .utf8)
            if text.split(separator: "\n").contains(where: {
                $0.hasPrefix("<<<<<<< ") || $0.hasPrefix(">>>>>>> ")
            }) {
                found.append(file)
            }
        }
        #expect(found.isEmpty, "conflict markers at \(found)")
    }
}
