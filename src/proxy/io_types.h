// The data plane's I/O types, all bound to the io_context's own executor type
// instead of Asio's default any_io_executor. With the concrete type every
// completion of a socket operation resumes its coroutine directly; with the
// type-erased one each hop goes through the erased executor's function
// pointers and work-tracking copies (a few percent of a request's user time).
#pragma once

#include <chrono>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace heft::proxy {

using Executor = boost::asio::io_context::executor_type;
using Socket = boost::asio::basic_stream_socket<boost::asio::ip::tcp, Executor>;
using Acceptor = boost::asio::basic_socket_acceptor<boost::asio::ip::tcp, Executor>;
using Timer = boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                                boost::asio::wait_traits<std::chrono::steady_clock>, Executor>;
template <class T>
using Task = boost::asio::awaitable<T, Executor>;
// co_await op(..., use_task): yields (error_code, results...) instead of throwing.
inline constexpr auto use_task = boost::asio::as_tuple(boost::asio::use_awaitable_t<Executor>{});

}  // namespace heft::proxy
