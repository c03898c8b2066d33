// h2c: HTTP/2 with prior knowledge on a plain listener (runtime.h).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "proxy/http2_serve.h"
#include "proxy/runtime.h"

namespace heft::proxy {

void start_http2(Worker& worker, Socket socket, uint16_t local_port, std::string client_ip, std::string received) {
  auto run = [](Worker& w, Socket client, uint16_t port, std::string ip, std::string bytes) -> Task<void> {
    co_await serve_http2(w, client, port, std::move(ip), bytes);
  };
  asio::co_spawn(worker.io, run(worker, std::move(socket), local_port, std::move(client_ip), std::move(received)),
                 asio::detached);
  worker.wake_sweep();
}

}  // namespace heft::proxy
