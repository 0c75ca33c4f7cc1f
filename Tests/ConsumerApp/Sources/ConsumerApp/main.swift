// What an app does with the client at launch: open its folder, read what is installed, and
// plan from the manifest its extension accepted.
import DepotClient
import DepotCore
import Foundation

let arguments = CommandLine.arguments
guard arguments.count == 3 else {
    print("usage: ConsumerApp CLIENT.json FOLDER")
    exit(2)
}
do {
    let configuration = try ClientConfiguration.decode(FileSystem.readFile(arguments[1]))
    let flow = try ExtensionFlow(configuration: configuration, destination: arguments[2])
    let state = try flow.store.read(app: configuration.app)
    print("\(state.packs.count) packs installed, \(flow.arrivedIdentifiers().count) waiting")
} catch {
    print("error: \(error)")
    exit(1)
}
