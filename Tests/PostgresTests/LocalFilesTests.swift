import Foundation
import Postgres
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// LocalFiles replaced Foundation's FileManager, URL and NSString in the embedded cluster and in
/// `findmy purge`: its paths must come out as Foundation's did, and its deletions must never
/// follow a link out of the tree being deleted.
struct LocalFilesTests {
    static let paths = [
        "/", "/a", "/a/", "/a//b", "/a/./b", "/a/b/..", "/a/b/../..", "/a/b/../../..", "/..", "/./",
        "/var/lib/findmy/../findmy/postgres-1", "relative", "relative/../x", "./x/./y/", "", ".", "..",
    ]

    @Test(arguments: paths)
    func anAbsolutePathIsFoundationsStandardizedFileURL(path: String) {
        let foundation = URL(fileURLWithPath: path).standardizedFileURL.path
        #expect(LocalFiles.absolutePath(path) == foundation)
    }

    @Test(arguments: ["x", "../y", "/abs/z", "./a/../b"])
    func aLinkTargetIsResolvedAgainstItsDirectoryAsFoundationDid(target: String) {
        let base = "/data/dir"
        let foundation = URL(fileURLWithPath: target, relativeTo: URL(fileURLWithPath: base + "/"))
            .standardizedFileURL.path
        #expect(LocalFiles.absolutePath(target, relativeTo: base) == foundation)
    }

    /// Absolute paths only: the callers give nothing else, and Foundation traps on some relative ones.
    @Test(arguments: ["/", "/a", "/a/", "/a/b", "/a/b/", "/a//b", "/a/b//", "/a/b/c.d"])
    func aParentDirectoryIsNSStringsDeletingLastPathComponent(path: String) {
        #expect(LocalFiles.parentDirectory(path) == (path as NSString).deletingLastPathComponent)
    }

    @Test func aNameWithoutADirectoryHasNoParent() {
        #expect(LocalFiles.parentDirectory("a") == "")
        #expect(LocalFiles.parentDirectory("") == "")
        #expect(LocalFiles.parentDirectory("a/b") == "a")
    }

    @Test func removeTreeDeletesLinksInsideButNotWhatTheyPointTo() throws {
        let root = try scratchDirectory()
        defer { try? LocalFiles.removeTree(root) }
        let outside = root + "/outside"
        try LocalFiles.makeDirectory(outside, mode: 0o700, intermediate: false)
        #expect(LocalFiles.append("", to: outside + "/keep") == false)
        #expect(FileManager.default.createFile(atPath: outside + "/keep", contents: Data("kept".utf8)))
        let tree = root + "/tree"
        try LocalFiles.makeDirectory(tree + "/a/b/c", mode: 0o700, intermediate: true)
        #expect(FileManager.default.createFile(atPath: tree + "/a/b/c/file", contents: Data("x".utf8)))
        #expect(symlink(outside, tree + "/a/link") == 0)

        try LocalFiles.removeTree(tree)

        #expect(!LocalFiles.exists(tree))
        #expect(LocalFiles.readText(outside + "/keep") == "kept")
        #expect(throws: LocalFileError.self) { try LocalFiles.removeTree(tree) }
    }

    @Test func directoriesAreMadeWithTheirParentsPrivateAndAnExistingOneIsFine() throws {
        let root = try scratchDirectory()
        defer { try? LocalFiles.removeTree(root) }
        let deep = root + "/one/two/three"
        #expect(throws: LocalFileError.self) {
            try LocalFiles.makeDirectory(deep, mode: 0o700, intermediate: false)
        }
        try LocalFiles.makeDirectory(deep, mode: 0o700, intermediate: true)
        try LocalFiles.makeDirectory(deep, mode: 0o700, intermediate: true)
        for path in [root + "/one", root + "/one/two", deep] {
            var info = stat()
            #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o700, "\(path)")
        }
        #expect(LocalFiles.entries(root + "/one") == ["two"])
        #expect(LocalFiles.entries(root + "/missing") == nil)
    }

    @Test func textIsReadFromAnOffsetAndLinksAreRead() throws {
        let root = try scratchDirectory()
        defer { try? LocalFiles.removeTree(root) }
        let file = root + "/log"
        #expect(FileManager.default.createFile(atPath: file, contents: Data("first\n".utf8)))
        #expect(LocalFiles.append("second\n", to: file))
        #expect(LocalFiles.readText(file) == "first\nsecond\n")
        #expect(LocalFiles.readText(file, from: 6) == "second\n")
        #expect(LocalFiles.size(file) == 13)
        #expect(LocalFiles.readText(root + "/missing") == nil)
        #expect(symlink("../somewhere/else", root + "/link") == 0)
        #expect(LocalFiles.linkTarget(root + "/link") == "../somewhere/else")
        #expect(LocalFiles.linkTarget(file) == nil)
        #expect(!LocalFiles.exists(root + "/link"))
        #expect(LocalFiles.exists(file) && !LocalFiles.isDirectory(file) && LocalFiles.isDirectory(root))
    }

    private func scratchDirectory() throws -> String {
        var template = Array((NSTemporaryDirectory() + "/localfiles-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard let made else { throw LocalFileError("mkdtemp", "", errno) }
        return String(cString: made)
    }

    /// Two accounts looked up from several threads at once: each answer is its own account's.
    /// With getpwnam's shared static entry, one thread read another's uid now and then, and a
    /// cluster's file was given to another cluster's user.
    @Test func accountsLookedUpOnManyThreadsAtOnceAreEachTheirOwn() async {
        #expect(LocalFiles.account(named: "root")?.uid == 0)
        #expect(LocalFiles.accountName(uid: 0) == "root")
        #expect(LocalFiles.account(named: "findmy-no-such-user") == nil)
        guard let nobody = LocalFiles.account(named: "nobody") else {
            Issue.record("no OS user nobody on this machine")
            return
        }
        let wrong = await withTaskGroup(of: Int.self) { group in
            for thread in 0..<4 {
                group.addTask {
                    var wrong = 0
                    for round in 0..<5_000 {
                        let asksRoot = (round + thread) % 2 == 0
                        let uid = LocalFiles.account(named: asksRoot ? "root" : "nobody")?.uid
                        if uid != (asksRoot ? 0 : nobody.uid) { wrong += 1 }
                    }
                    return wrong
                }
            }
            return await group.reduce(0, +)
        }
        #expect(wrong == 0)
    }
}
