{-# LANGUAGE BangPatterns #-}
-- ring: 503 threads in a ring of MVars pass a token n hops (shootout
-- thread-ring, nofib threads003).  Thread i (1-based) takes from MVar i and
-- puts token-1 into MVar (i+1) mod 503; whoever receives 0 reports its index.
-- Metric: ns_per_hop = elapsed_ns / n.  Check: index == (n mod 503) + 1.
-- Haskell twin of nofib_like/ring.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (forM_, when)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

ringSize :: Int
ringSize = 503

ringThread :: Int -> MVar Int -> MVar Int -> MVar Int -> IO ()
ringThread idx inp out result = loop
  where
    loop = do
      !t <- takeMVar inp
      if t == 0 then putMVar result idx
                else putMVar out (t - 1) >> loop

body :: Int -> IO (Double, Bool)
body n = do
  mvs <- mapM (const newEmptyMVar) [1 .. ringSize]
  result <- newEmptyMVar
  -- The threads that never see 0 stay blocked; the RTS drops them at exit.
  forM_ (zip3 [1 ..] mvs (tail mvs ++ [head mvs])) $ \(i, inp, out) ->
    forkIO (ringThread i inp out result)
  t0 <- getMonotonicTimeNSec
  putMVar (head mvs) n
  winner <- takeMVar result
  t1 <- getMonotonicTimeNSec
  let ns = fromIntegral (t1 - t0) / fromIntegral (max 1 n) :: Double
  return (ns, winner == n `mod` ringSize + 1)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 10000000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)   -- timed body runs in an unbound thread
  (ns, ok) <- takeMVar r
  printf "capstan-bench name=ring impl=ghc caps=%d n=%d ns_per_hop=%.2f check=%s\n"
    caps n ns (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
