{-# LANGUAGE BangPatterns #-}
-- threads003: 500 threads in a line, each taking a value from the MVar on
-- its left and putting value + 1 into the one on its right; a pump feeds
-- n values in, the body takes them out at the other end.
-- ns_per_hop = elapsed / (n * 500); base_ns = per hop through a line of
-- one thread, 50 n values (at -N2 each of those hops costs GHC an OS
-- wake-up, ~16 us: the full 500 n would take minutes).  Check: every value came out + length.
-- Haskell twin of nofib_like/threads003.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

line :: Int -> Int -> IO (Double, Bool)
line n len = do
  ms <- replicateM (len + 1) newEmptyMVar
  t0 <- getMonotonicTimeNSec
  forM_ (zip ms (tail ms)) $ \(inp, out) ->
    forkIO $ replicateM_ n (takeMVar inp >>= \v -> putMVar out $! v + 1)
  _ <- forkIO $ forM_ [0 .. n - 1] (putMVar (head ms))
  let out = last ms
      go !k !good | k >= n = return good
                  | otherwise = do v <- takeMVar out
                                   go (k + 1) (good && v == k + len)
  ok <- go 0 True
  t1 <- getMonotonicTimeNSec
  return (fromIntegral (t1 - t0) / (fromIntegral n * fromIntegral len), ok)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 20000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO $ do a <- line n 500
                   b <- line (n * 50) 1
                   putMVar r (a, b)
  ((ns, ok1), (base, ok2)) <- takeMVar r
  let ok = ok1 && ok2
  printf "capstan-bench name=threads003 impl=ghc caps=%d n=%d ns_per_hop=%.2f base_ns=%.2f check=%s\n"
    caps n ns base (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
