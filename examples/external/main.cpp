// An application outside Fusee's tree, built against an installed Fusee and
// nothing else (docs/install.md): with pkg-config and a plain compiler, with
// meson (meson.build here) or with CMake (CMakeLists.txt here).
// tests/external.sh installs Fusee into a staging prefix and builds and runs
// it all three ways.
//
// One workflow, "greet": a step, a signal, an update and a stream, in local
// mode. Usage: greet DATA_DIR. Prints the update's answer, the result and
// the stream.
#include <fusee/fusee.hpp>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

const fusee::WorkflowRef<std::string, std::string> kGreet{"greet"};
const fusee::Signal<std::string> kName{"name"};
// Answers the greeting's length, once the name has come.
const fusee::Update<int, int> kLength{"length"};

fusee::Task<std::string> greet(fusee::Ctx& ctx, std::string greeting) {
  // Named before the co_await: GCC miscompiles a lambda that owns a
  // std::string when it is written inside one, and the SDK refuses that form
  // on GCC (docs/compilers.md). clang takes either.
  auto shout = [greeting] {
    std::string loud = greeting;
    for (char& c : loud) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return loud;
  };
  std::string loud = co_await ctx.step("shout", shout);

  auto name = co_await ctx.wait_for(kName).timeout(std::chrono::minutes(1));

  std::string line = loud + ", " + name.value_or("nobody");
  ctx.on_update(kLength);
  auto asked = co_await ctx.next_update(kLength);
  co_await ctx.reply(asked, static_cast<int>(line.size()) + asked.arg);

  auto lines = ctx.stream("lines");
  co_await lines.write(line);
  co_await lines.write(std::string("bye"));
  co_await lines.close();
  co_return line;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: greet DATA_DIR\n");
    return 2;
  }
  auto engine = fusee::Engine::open(fusee::Config::local(argv[1]));
  engine->register_workflow(kGreet, greet);

  engine->start(kGreet, "greet-1", std::string("hello"));
  engine->signal("greet-1", kName, std::string("world"), "name-1");
  int length = engine->update("greet-1", kLength, 0, "length-1");
  std::string result = engine->result(kGreet, "greet-1");

  std::vector<std::string> chunks;
  auto reader = engine->read_stream("greet-1", "lines");
  while (auto chunk = reader.next()) chunks.push_back(boost::json::value_to<std::string>(chunk->value));

  std::printf("fusee %s\nlength: %d\nresult: %s\nstream:", FUSEE_VERSION_STRING, length, result.c_str());
  for (const auto& chunk : chunks) std::printf(" [%s]", chunk.c_str());
  std::printf("\n");
  bool right = result == "HELLO, world" && chunks == std::vector<std::string>{"HELLO, world", "bye"};
  if (!right) std::fprintf(stderr, "greet: not the expected result and stream\n");
  return right ? 0 : 1;
}
