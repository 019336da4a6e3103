-- deadlock: time from the last thread blocking (the body, on an MVar
-- nobody else can fill, after `threads` others blocked on theirs) to
-- BlockedIndefinitelyOnMVar arriving in it.  n rounds; ms = median,
-- max_ms = the slowest.  Check: it arrived in every round.
-- Haskell twin of nofib_like/deadlock.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.List (sort)
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Conc (ThreadStatus (..), threadStatus)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

waitBlocked :: ThreadId -> IO ()
waitBlocked t = do
  s <- threadStatus t
  case s of
    ThreadBlocked _ -> return ()
    _ -> yield >> waitBlocked t

round1 :: Int -> IO (Maybe Double)
round1 threads = do
  tids <- replicateM threads $ do
    m <- newEmptyMVar :: IO (MVar ())
    forkIO (takeMVar m `catch` \BlockedIndefinitelyOnMVar -> return ())
  mapM_ waitBlocked tids
  never <- newEmptyMVar :: IO (MVar ())
  t0 <- getMonotonicTimeNSec
  r <- try (takeMVar never)
  t1 <- getMonotonicTimeNSec
  return $ case r of
    Left BlockedIndefinitelyOnMVar -> Just (fromIntegral (t1 - t0) / 1e6)
    Right () -> Nothing

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 10
      threads = case args of (_ : k : _) -> read k; _ -> 100
  caps <- getNumCapabilities
  rs <- replicateM n (round1 threads)
  let ok = all (/= Nothing) rs
      ms = sort [x | Just x <- rs]
      med = if null ms then 0 else ms !! (length ms `div` 2)
      mx = if null ms then 0 else last ms
  printf "capstan-bench name=deadlock impl=ghc caps=%d n=%d ms=%.2f max_ms=%.2f check=%s\n"
    caps n med mx (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
