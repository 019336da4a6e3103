-- waitgroup: fork n threads that each count down a shared counter; the
-- last one fills an MVar, which main waits on (Haskell's wait group idiom;
-- the shape of threads001).  Haskell twin of nofib_like/waitgroup.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (forM_, when)
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a :: Int; [] -> 100000
  caps <- getNumCapabilities
  left <- newIORef n
  done <- newEmptyMVar
  t0 <- getMonotonicTimeNSec
  forM_ [1 .. n] $ \_ -> forkIO $ do
    k <- atomicModifyIORef' left (\x -> (x - 1, x - 1))
    when (k == 0) (putMVar done ())
  takeMVar done
  t1 <- getMonotonicTimeNSec
  k <- readIORef left
  let ns = fromIntegral (t1 - t0) / fromIntegral n :: Double
      ok = k == 0
  printf "capstan-bench name=waitgroup impl=ghc caps=%d n=%d ns_per_thread=%.2f threads001_ns_per_thread=na check=%s\n"
    caps n ns (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
